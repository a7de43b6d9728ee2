// The coordinator's Prometheus metrics (DESIGN.md §4), in base units:
//   sbp_jobs{state}                    gauge, jobs per state
//   sbp_job_queue_wait_seconds         histogram, PENDING -> RUNNING
//   sbp_workers{state}                 gauge, idle / busy / lost
//   sbp_job_restarts_total             counter, attempts restarted
//   sbp_job_preemptions_total          counter, attempts preempted (not restarts)
//   sbp_grpc_requests_total{method,code}
//   sbp_job_progress_step{job_id}, sbp_job_tokens_per_second{job_id},
//   sbp_job_peak_bytes{job_id}         gauges, only while the job is not terminal
//   sbp_worker_heartbeat_age_seconds{worker}  gauge, only for live workers
//   sbp_jobs_pending{cause}            gauge, pending jobs by why they wait
//                                      (no_workers, too_few_fitting_workers, workers_busy,
//                                      quota, preempting)
//   sbp_scheduler_pass_seconds         histogram, one scheduling pass (its decisions;
//                                      the writes that follow are not in it)
// Every method is thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/job_state.h"

namespace sbp::server {

class Metrics {
 public:
  Metrics();
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  void SetJobCount(JobState state, double count);
  void ObserveQueueWait(double seconds);
  void ObserveSchedulingPass(double seconds);
  void SetWorkerCounts(double idle, double busy, double lost);
  void CountRestart();
  void CountPreemption();
  void CountRequest(absl::string_view method, absl::string_view code);
  void SetJobProgress(const std::string& job_id, double step, double tokens_per_second,
                      double peak_bytes);
  void RemoveJob(const std::string& job_id);
  void SetHeartbeatAge(const std::string& worker_id, double seconds);
  void RemoveWorker(const std::string& worker_id);
  void SetPendingCount(absl::string_view cause, double count);

 private:
  struct JobGauges {
    prometheus::Gauge* step;
    prometheus::Gauge* tokens_per_second;
    prometheus::Gauge* peak_bytes;
  };

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Histogram& queue_wait_;
  prometheus::Histogram& scheduling_pass_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Counter& restarts_;
  prometheus::Counter& preemptions_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Gauge>& job_step_;
  prometheus::Family<prometheus::Gauge>& job_tokens_per_second_;
  prometheus::Family<prometheus::Gauge>& job_peak_bytes_;
  prometheus::Family<prometheus::Gauge>& heartbeat_age_;
  prometheus::Family<prometheus::Gauge>& pending_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, JobGauges> job_gauges_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, prometheus::Gauge*> worker_gauges_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sbp::server
