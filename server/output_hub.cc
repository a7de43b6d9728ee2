#include "server/output_hub.h"

#include <algorithm>
#include <utility>

namespace sbp::server {

OutputHub::Subscription::~Subscription() {
  absl::MutexLock lock(&hub_->mu_);
  auto it = hub_->subscriptions_.find(job_id_);
  if (it == hub_->subscriptions_.end()) return;
  std::vector<Subscription*>& list = it->second;
  list.erase(std::remove(list.begin(), list.end(), this), list.end());
  if (list.empty()) hub_->subscriptions_.erase(it);
}

std::unique_ptr<OutputHub::Subscription> OutputHub::Subscribe(const std::string& job_id,
                                                              std::function<void()> listener) {
  std::unique_ptr<Subscription> subscription(new Subscription(this, job_id, std::move(listener)));
  absl::MutexLock lock(&mu_);
  subscriptions_[job_id].push_back(subscription.get());
  return subscription;
}

void OutputHub::Notify(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = subscriptions_.find(job_id);
  if (it == subscriptions_.end()) return;
  for (Subscription* subscription : it->second) subscription->listener_();
}

}  // namespace sbp::server
