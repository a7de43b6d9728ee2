// The worker's Prometheus metrics (DESIGN.md §4), served at
// http://<listen>/metrics. Training series carry a `job_id` label (not `job`,
// which Prometheus keeps for the scrape job); only the current (or last)
// job's series are kept, so the label stays bounded.
//
// Memory by tier: sbp_worker_memory_{peak,current}_bytes{tier} with tier
// "device" (the allocator's bytes), "host" (host memory the memory tiers
// hold: offloaded layer checkpoints, optimizer state) and "disk" (the disk
// tier's file), for the current or last run; the offload copies between the
// device and host or disk as sbp_offload_copy_bytes_total,
// sbp_offload_copy_bytes_per_second (the latest step's, while copying) and
// sbp_offload_wait_seconds_total (compute waiting for copies).
//
// Online GRPO's rollouts, per job and only for jobs that sample online (from
// their first step on): sbp_rollout_reward_{mean,std},
// sbp_rollout_completion_length_{mean,max} (new tokens),
// sbp_rollout_truncated_ratio (completions cut off at max_new_tokens) and
// sbp_rollout_tokens_per_second of the latest step, and the step time split
// into sbp_rollout_seconds_total (sampling and scoring) and
// sbp_train_compute_seconds_total (forward, backward, update).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics_http_server.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "worker/train/trainer.h"

namespace sbp {

class WorkerMetrics {
 public:
  // `listen` "host:port" ("host:0" picks a free port); "" keeps the metrics
  // in memory only. Fails when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<WorkerMetrics>> Create(const std::string& listen,
                                                               int64_t capacity_bytes);
  ~WorkerMetrics();

  // "host:port" actually bound; "" without an endpoint.
  std::string address() const { return address_; }
  prometheus::Registry& registry() { return *registry_; }

  // The device tier's allocator figures.
  void SetMemory(int64_t current_bytes, int64_t peak_bytes);
  void OnStep(const std::string& job_id, const StepReport& report);
  // The run ended: nothing is held in any tier any more (peaks stay).
  void EndRun();

 private:
  WorkerMetrics();
  void SwitchJob(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnRollout(const RolloutReport& rollout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveRolloutSeries() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsHttpServer> exposer_;
  std::string address_;

  struct TierGauges {
    prometheus::Gauge* peak = nullptr;
    prometheus::Gauge* current = nullptr;
  };
  TierGauges device_, host_, disk_;
  prometheus::Gauge* memory_capacity_;
  prometheus::Counter* offload_copy_bytes_;
  prometheus::Gauge* offload_copy_rate_;
  prometheus::Counter* offload_wait_seconds_;
  prometheus::Family<prometheus::Counter>* tokens_total_;
  prometheus::Family<prometheus::Gauge>* tokens_per_second_;
  prometheus::Family<prometheus::Histogram>* step_seconds_;
  prometheus::Family<prometheus::Gauge>* loss_;
  prometheus::Family<prometheus::Gauge>* eval_loss_;
  prometheus::Family<prometheus::Gauge>* mfu_;
  prometheus::Family<prometheus::Gauge>* step_;
  prometheus::Family<prometheus::Gauge>* rollout_reward_mean_;
  prometheus::Family<prometheus::Gauge>* rollout_reward_std_;
  prometheus::Family<prometheus::Gauge>* rollout_length_mean_;
  prometheus::Family<prometheus::Gauge>* rollout_length_max_;
  prometheus::Family<prometheus::Gauge>* rollout_truncated_;
  prometheus::Family<prometheus::Gauge>* rollout_tokens_per_second_;
  prometheus::Family<prometheus::Counter>* rollout_seconds_;
  prometheus::Family<prometheus::Counter>* train_compute_seconds_;

  absl::Mutex mu_;
  std::string job_ ABSL_GUARDED_BY(mu_);
  int64_t disk_peak_ ABSL_GUARDED_BY(mu_) = 0;  // of the current or last job
  struct JobSeries {
    prometheus::Counter* tokens_total = nullptr;
    prometheus::Gauge* tokens_per_second = nullptr;
    prometheus::Histogram* step_seconds = nullptr;
    prometheus::Gauge* loss = nullptr;
    prometheus::Gauge* eval_loss = nullptr;  // from the job's first validation on
    prometheus::Gauge* mfu = nullptr;
    prometheus::Gauge* step = nullptr;
    // From the job's first step with rollouts on (all null before).
    struct Rollout {
      prometheus::Gauge* reward_mean = nullptr;
      prometheus::Gauge* reward_std = nullptr;
      prometheus::Gauge* length_mean = nullptr;
      prometheus::Gauge* length_max = nullptr;
      prometheus::Gauge* truncated = nullptr;
      prometheus::Gauge* tokens_per_second = nullptr;
      prometheus::Counter* rollout_seconds = nullptr;
      prometheus::Counter* train_seconds = nullptr;
    } rollout;
  } series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sbp
