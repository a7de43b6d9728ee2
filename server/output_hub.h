// Tells the Metrics and Logs streams that follow a job when new lines of it
// were stored. A listener runs on the notifying thread, under the hub's lock:
// it must only note the news (queue its stream), never block or call back in.
// Once its subscription is destroyed it is never called again.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace sbp::server {

class OutputHub {
 public:
  class Subscription {
   public:
    ~Subscription();
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;

   private:
    friend class OutputHub;
    Subscription(OutputHub* hub, std::string job_id, std::function<void()> listener)
        : hub_(hub), job_id_(std::move(job_id)), listener_(std::move(listener)) {}
    OutputHub* hub_;
    std::string job_id_;
    std::function<void()> listener_;
  };

  std::unique_ptr<Subscription> Subscribe(const std::string& job_id,
                                          std::function<void()> listener);
  // Runs the listeners of `job_id`'s subscriptions.
  void Notify(const std::string& job_id);

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<Subscription*>> subscriptions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sbp::server
