#include "server/watch_hub.h"

#include <algorithm>
#include <utility>

namespace sbp::server {

WatchHub::Subscription::~Subscription() { hub_->Unsubscribe(this); }

std::vector<WatchHub::Snapshot> WatchHub::Subscription::Next(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&hub_->mu_);
  while (queue_.empty() && !hub_->shutdown_) {
    if (cv_.WaitWithDeadline(&hub_->mu_, deadline)) break;  // timed out
  }
  std::vector<Snapshot> out(std::make_move_iterator(queue_.begin()),
                            std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

std::vector<WatchHub::Snapshot> WatchHub::Subscription::Take() {
  absl::MutexLock lock(&hub_->mu_);
  std::vector<Snapshot> out(std::make_move_iterator(queue_.begin()),
                            std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

void WatchHub::Subscription::SetListener(std::function<void()> listener) {
  auto shared = std::make_shared<const std::function<void()>>(std::move(listener));
  absl::MutexLock lock(&hub_->mu_);
  listener_ = std::move(shared);
}

bool WatchHub::Subscription::closed() const {
  absl::MutexLock lock(&hub_->mu_);
  return hub_->shutdown_;
}

std::unique_ptr<WatchHub::Subscription> WatchHub::Subscribe(const std::string& job_id) {
  std::unique_ptr<Subscription> sub(new Subscription(this, job_id));
  absl::MutexLock lock(&mu_);
  watchers_[job_id].push_back(sub.get());
  ++count_;
  return sub;
}

void WatchHub::Unsubscribe(Subscription* subscription) {
  absl::MutexLock lock(&mu_);
  auto it = watchers_.find(subscription->job_id_);
  if (it == watchers_.end()) return;
  auto& list = it->second;
  list.erase(std::remove(list.begin(), list.end(), subscription), list.end());
  if (list.empty()) watchers_.erase(it);
  --count_;
}

void WatchHub::Publish(const JobRecord& job) {
  std::vector<std::shared_ptr<const std::function<void()>>> listeners;
  {
    absl::MutexLock lock(&mu_);
    auto it = watchers_.find(job.id);
    if (it == watchers_.end()) return;
    auto snapshot = std::make_shared<const JobRecord>(job);
    for (Subscription* sub : it->second) {
      if (sub->queue_.size() >= kMaxQueued) sub->queue_.pop_front();
      sub->queue_.push_back(snapshot);
      sub->cv_.Signal();
      if (sub->listener_ != nullptr) listeners.push_back(sub->listener_);
    }
  }
  for (const auto& listener : listeners) (*listener)();
}

void WatchHub::Shutdown() {
  std::vector<std::shared_ptr<const std::function<void()>>> listeners;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    for (auto& [id, list] : watchers_) {
      for (Subscription* sub : list) {
        sub->cv_.SignalAll();
        if (sub->listener_ != nullptr) listeners.push_back(sub->listener_);
      }
    }
  }
  for (const auto& listener : listeners) (*listener)();
}

bool WatchHub::watched(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  return watchers_.contains(job_id);
}

std::vector<std::string> WatchHub::WatchedJobs() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  ids.reserve(watchers_.size());
  for (const auto& [id, subscriptions] : watchers_) ids.push_back(id);
  return ids;
}

size_t WatchHub::watcher_count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

}  // namespace sbp::server
