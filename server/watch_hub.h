// Fans job changes out to Watch streams. The job manager publishes every new
// version of a job; each subscription of that job gets it queued (one shared
// snapshot for all watchers) and its waiter woken. Jobs nobody watches cost
// one hash lookup per change. A watcher that falls far behind keeps only the
// newest snapshots (each is complete, so nothing but intermediate progress
// is lost).
//
// A subscriber either waits in Next() (one thread per subscriber) or sets a
// listener and takes snapshots when told (callback streams: no thread).
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/records.h"

namespace sbp::server {

class WatchHub {
 public:
  using Snapshot = std::shared_ptr<const JobRecord>;

  class Subscription {
   public:
    ~Subscription();
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;
    // Snapshots published since the last call, oldest first; waits up to
    // `timeout` when there are none. Empty after a timeout or a shutdown.
    std::vector<Snapshot> Next(absl::Duration timeout);
    // Snapshots published since the last call, without waiting.
    std::vector<Snapshot> Take();
    bool closed() const;
    // `listener` runs after each Publish that queued a snapshot here and at
    // Shutdown, on the publishing thread, without the hub's lock held. It
    // must not block, and may run once more after the subscription is gone
    // (it must not reach this object).
    void SetListener(std::function<void()> listener);

   private:
    friend class WatchHub;
    Subscription(WatchHub* hub, std::string job_id) : hub_(hub), job_id_(std::move(job_id)) {}
    WatchHub* hub_;
    std::string job_id_;
    std::deque<Snapshot> queue_;  // guarded by hub_->mu_
    absl::CondVar cv_;
    std::shared_ptr<const std::function<void()>> listener_;  // guarded by hub_->mu_
  };

  static constexpr size_t kMaxQueued = 256;

  std::unique_ptr<Subscription> Subscribe(const std::string& job_id);
  void Publish(const JobRecord& job);
  // Wakes every subscription; Next() returns at once from then on.
  void Shutdown();
  size_t watcher_count() const;
  // Whether anyone watches `job_id` now.
  bool watched(const std::string& job_id) const;
  // The jobs someone watches now (at most the coordinator's stream cap).
  std::vector<std::string> WatchedJobs() const;

 private:
  void Unsubscribe(Subscription* subscription);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<Subscription*>> watchers_ ABSL_GUARDED_BY(mu_);
  size_t count_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sbp::server
