#include "server/metrics.h"

#include "absl/strings/ascii.h"
#include "server/scheduler.h"

namespace sbp::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

// The label naming the training job. Not `job`: Prometheus reserves that for
// the scrape job (a scrape would rename ours exported_job or overwrite it).
constexpr char kJobIdLabel[] = "job_id";

prometheus::Family<prometheus::Histogram>& QueueWaitFamily(prometheus::Registry& registry) {
  return BuildHistogram()
      .Name("sbp_job_queue_wait_seconds")
      .Help("Time from entering PENDING to RUNNING, per attempt")
      .Register(registry);
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      jobs_(BuildGauge().Name("sbp_jobs").Help("Jobs by state").Register(*registry_)),
      queue_wait_(
          QueueWaitFamily(*registry_)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                                                               5, 10, 30, 60, 300, 900, 3600})),
      scheduling_pass_(
          BuildHistogram()
              .Name("sbp_scheduler_pass_seconds")
              .Help("Duration of one scheduling pass (its decisions)")
              .Register(*registry_)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.0001, 0.00025, 0.0005, 0.001,
                                                               0.0025, 0.005, 0.01, 0.025, 0.05,
                                                               0.1, 0.25, 1})),
      workers_(BuildGauge().Name("sbp_workers").Help("Workers by state").Register(*registry_)),
      restarts_(BuildCounter()
                    .Name("sbp_job_restarts_total")
                    .Help("Job attempts restarted after a retryable failure")
                    .Register(*registry_)
                    .Add({})),
      preemptions_(BuildCounter()
                       .Name("sbp_job_preemptions_total")
                       .Help("Job attempts preempted by higher-priority jobs (checkpointed and "
                             "stopped; not restarts)")
                       .Register(*registry_)
                       .Add({})),
      requests_(BuildCounter()
                    .Name("sbp_grpc_requests_total")
                    .Help("gRPC requests handled, by method and status code")
                    .Register(*registry_)),
      job_step_(BuildGauge()
                    .Name("sbp_job_progress_step")
                    .Help("Latest training step of each job that is not finished")
                    .Register(*registry_)),
      job_tokens_per_second_(BuildGauge()
                                 .Name("sbp_job_tokens_per_second")
                                 .Help("Latest training throughput of each unfinished job")
                                 .Register(*registry_)),
      job_peak_bytes_(BuildGauge()
                          .Name("sbp_job_peak_bytes")
                          .Help("Peak allocator bytes over the ranks of each unfinished job")
                          .Register(*registry_)),
      heartbeat_age_(BuildGauge()
                         .Name("sbp_worker_heartbeat_age_seconds")
                         .Help("Seconds since each live worker's latest heartbeat")
                         .Register(*registry_)),
      pending_(BuildGauge()
                   .Name("sbp_jobs_pending")
                   .Help("Pending jobs by why they wait: no_workers, too_few_fitting_workers "
                         "(no registered worker has the memory), workers_busy, quota, preempting")
                   .Register(*registry_)) {
  for (JobState state : kAllJobStates) {
    jobs_.Add({{"state", absl::AsciiStrToLower(JobStateName(state))}}).Set(0);
  }
  SetWorkerCounts(0, 0, 0);
  for (WaitCause cause : kAllWaitCauses) SetPendingCount(WaitCauseName(cause), 0);
}

void Metrics::SetPendingCount(absl::string_view cause, double count) {
  pending_.Add({{"cause", std::string(cause)}}).Set(count);
}

void Metrics::SetJobCount(JobState state, double count) {
  jobs_.Add({{"state", absl::AsciiStrToLower(JobStateName(state))}}).Set(count);
}

void Metrics::ObserveQueueWait(double seconds) { queue_wait_.Observe(seconds); }

void Metrics::ObserveSchedulingPass(double seconds) { scheduling_pass_.Observe(seconds); }

void Metrics::SetWorkerCounts(double idle, double busy, double lost) {
  workers_.Add({{"state", "idle"}}).Set(idle);
  workers_.Add({{"state", "busy"}}).Set(busy);
  workers_.Add({{"state", "lost"}}).Set(lost);
}

void Metrics::CountRestart() { restarts_.Increment(); }

void Metrics::CountPreemption() { preemptions_.Increment(); }

void Metrics::CountRequest(absl::string_view method, absl::string_view code) {
  requests_.Add({{"method", std::string(method)}, {"code", std::string(code)}}).Increment();
}

void Metrics::SetJobProgress(const std::string& job_id, double step, double tokens_per_second,
                             double peak_bytes) {
  absl::MutexLock lock(&mu_);
  auto it = job_gauges_.find(job_id);
  if (it == job_gauges_.end()) {
    const prometheus::Labels labels{{kJobIdLabel, job_id}};
    it = job_gauges_
             .emplace(job_id, JobGauges{&job_step_.Add(labels), &job_tokens_per_second_.Add(labels),
                                        &job_peak_bytes_.Add(labels)})
             .first;
  }
  it->second.step->Set(step);
  it->second.tokens_per_second->Set(tokens_per_second);
  it->second.peak_bytes->Set(peak_bytes);
}

void Metrics::RemoveJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = job_gauges_.find(job_id);
  if (it == job_gauges_.end()) return;
  job_step_.Remove(it->second.step);
  job_tokens_per_second_.Remove(it->second.tokens_per_second);
  job_peak_bytes_.Remove(it->second.peak_bytes);
  job_gauges_.erase(it);
}

void Metrics::SetHeartbeatAge(const std::string& worker_id, double seconds) {
  absl::MutexLock lock(&mu_);
  auto it = worker_gauges_.find(worker_id);
  if (it == worker_gauges_.end()) {
    it = worker_gauges_.emplace(worker_id, &heartbeat_age_.Add({{"worker", worker_id}})).first;
  }
  it->second->Set(seconds);
}

void Metrics::RemoveWorker(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = worker_gauges_.find(worker_id);
  if (it == worker_gauges_.end()) return;
  heartbeat_age_.Remove(it->second);
  worker_gauges_.erase(it);
}

}  // namespace sbp::server
