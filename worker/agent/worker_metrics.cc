#include "worker/agent/worker_metrics.h"

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/agent/progress_convert.h"

namespace sbp {
namespace {

// The label naming the training job. Not `job`: Prometheus reserves that for
// the scrape job (a scrape would rename ours exported_job or overwrite it).
constexpr char kJobIdLabel[] = "job_id";

// "host:port" -> host, for reporting the bound port of "host:0".
std::string HostOf(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  return colon == std::string::npos ? listen : listen.substr(0, colon);
}

}  // namespace

WorkerMetrics::WorkerMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& memory_peak = prometheus::BuildGauge()
                          .Name("sbp_worker_memory_peak_bytes")
                          .Help(
                              "Peak bytes of the worker's current or last run, by memory tier: "
                              "device (allocator), host (offloaded state), disk (offload file)")
                          .Register(*registry_);
  auto& memory_current = prometheus::BuildGauge()
                             .Name("sbp_worker_memory_current_bytes")
                             .Help(
                                 "Bytes the current run holds, by memory tier: device "
                                 "(allocator), host (offloaded state), disk (offload file)")
                             .Register(*registry_);
  auto& memory_capacity = prometheus::BuildGauge()
                              .Name("sbp_worker_memory_capacity_bytes")
                              .Help("Memory the worker advertises and enforces as a budget")
                              .Register(*registry_);
  for (auto [tier, gauges] : {std::pair<const char*, TierGauges*>{"device", &device_},
                              {"host", &host_},
                              {"disk", &disk_}}) {
    gauges->peak = &memory_peak.Add({{"tier", tier}});
    gauges->current = &memory_current.Add({{"tier", tier}});
  }
  memory_capacity_ = &memory_capacity.Add({});
  offload_copy_bytes_ = &prometheus::BuildCounter()
                             .Name("sbp_offload_copy_bytes_total")
                             .Help(
                                 "Bytes copied between the device and host memory or disk by "
                                 "the memory tiers")
                             .Register(*registry_)
                             .Add({});
  offload_copy_rate_ = &prometheus::BuildGauge()
                            .Name("sbp_offload_copy_bytes_per_second")
                            .Help(
                                "Copy rate of the memory tiers in the latest step (bytes over "
                                "the seconds the copies ran; 0 when nothing was copied)")
                            .Register(*registry_)
                            .Add({});
  offload_wait_seconds_ = &prometheus::BuildCounter()
                               .Name("sbp_offload_wait_seconds_total")
                               .Help("Seconds the compute waited for the memory tiers' copies")
                               .Register(*registry_)
                               .Add({});
  tokens_total_ = &prometheus::BuildCounter()
                       .Name("sbp_train_tokens_total")
                       .Help("Tokens trained on by this worker")
                       .Register(*registry_);
  tokens_per_second_ = &prometheus::BuildGauge()
                            .Name("sbp_train_tokens_per_second")
                            .Help("Throughput of the latest step")
                            .Register(*registry_);
  step_seconds_ = &prometheus::BuildHistogram()
                       .Name("sbp_train_step_seconds")
                       .Help("Wall time of one optimizer step")
                       .Register(*registry_);
  loss_ = &prometheus::BuildGauge()
               .Name("sbp_train_loss")
               .Help("Loss of the latest step")
               .Register(*registry_);
  eval_loss_ = &prometheus::BuildGauge()
                    .Name("sbp_eval_loss")
                    .Help("Validation loss of the latest evaluation (jobs with eval:)")
                    .Register(*registry_);
  mfu_ = &prometheus::BuildGauge()
              .Name("sbp_train_mfu_ratio")
              .Help("Model FLOP utilisation of the latest step (0..1)")
              .Register(*registry_);
  step_ = &prometheus::BuildGauge()
               .Name("sbp_train_step")
               .Help("Latest completed optimizer step")
               .Register(*registry_);
  rollout_reward_mean_ = &prometheus::BuildGauge()
                              .Name("sbp_rollout_reward_mean")
                              .Help(
                                  "Mean reward of the completions online GRPO sampled in the "
                                  "latest step")
                              .Register(*registry_);
  rollout_reward_std_ = &prometheus::BuildGauge()
                             .Name("sbp_rollout_reward_std")
                             .Help(
                                 "Standard deviation of the rewards of the latest step's "
                                 "completions (online GRPO)")
                             .Register(*registry_);
  rollout_length_mean_ = &prometheus::BuildGauge()
                              .Name("sbp_rollout_completion_length_mean")
                              .Help(
                                  "Mean new tokens per completion sampled in the latest step "
                                  "(online GRPO)")
                              .Register(*registry_);
  rollout_length_max_ = &prometheus::BuildGauge()
                             .Name("sbp_rollout_completion_length_max")
                             .Help(
                                 "Most new tokens of a completion sampled in the latest step "
                                 "(online GRPO)")
                             .Register(*registry_);
  rollout_truncated_ = &prometheus::BuildGauge()
                            .Name("sbp_rollout_truncated_ratio")
                            .Help(
                                "Fraction of the latest step's completions cut off at "
                                "max_new_tokens (online GRPO, 0..1)")
                            .Register(*registry_);
  rollout_tokens_per_second_ = &prometheus::BuildGauge()
                                    .Name("sbp_rollout_tokens_per_second")
                                    .Help(
                                        "New tokens sampled per second of rollout in the latest "
                                        "step (online GRPO)")
                                    .Register(*registry_);
  rollout_seconds_ = &prometheus::BuildCounter()
                          .Name("sbp_rollout_seconds_total")
                          .Help(
                              "Seconds of online GRPO's steps spent sampling and scoring "
                              "completions (the slowest rank)")
                          .Register(*registry_);
  train_compute_seconds_ = &prometheus::BuildCounter()
                                .Name("sbp_train_compute_seconds_total")
                                .Help(
                                    "Seconds of online GRPO's steps spent training: forward, "
                                    "backward and the update (the rest of the step)")
                                .Register(*registry_);
}

WorkerMetrics::~WorkerMetrics() { exposer_.reset(); }

absl::StatusOr<std::unique_ptr<WorkerMetrics>> WorkerMetrics::Create(const std::string& listen,
                                                                     int64_t capacity_bytes) {
  std::unique_ptr<WorkerMetrics> metrics(new WorkerMetrics());
  metrics->memory_capacity_->Set(static_cast<double>(capacity_bytes));
  if (listen.empty()) return metrics;
  auto server = MetricsHttpServer::Start(listen, metrics->registry_);
  if (!server.ok()) return server.status();
  metrics->exposer_ = *std::move(server);
  metrics->address_ = absl::StrCat(HostOf(listen), ":", metrics->exposer_->port());
  return metrics;
}

void WorkerMetrics::SetMemory(int64_t current_bytes, int64_t peak_bytes) {
  device_.current->Set(static_cast<double>(current_bytes));
  device_.peak->Set(static_cast<double>(peak_bytes));
}

void WorkerMetrics::EndRun() {
  device_.current->Set(0);
  host_.current->Set(0);
  disk_.current->Set(0);
  offload_copy_rate_->Set(0);
}

void WorkerMetrics::SwitchJob(const std::string& job_id) {
  if (job_id == job_) return;
  if (!job_.empty()) {
    tokens_total_->Remove(series_.tokens_total);
    tokens_per_second_->Remove(series_.tokens_per_second);
    step_seconds_->Remove(series_.step_seconds);
    loss_->Remove(series_.loss);
    if (series_.eval_loss != nullptr) eval_loss_->Remove(series_.eval_loss);
    mfu_->Remove(series_.mfu);
    step_->Remove(series_.step);
    RemoveRolloutSeries();
  }
  job_ = job_id;
  disk_peak_ = 0;
  const prometheus::Labels labels = {{kJobIdLabel, job_id}};
  series_.tokens_total = &tokens_total_->Add(labels);
  series_.tokens_per_second = &tokens_per_second_->Add(labels);
  series_.step_seconds = &step_seconds_->Add(
      labels, prometheus::Histogram::BucketBoundaries{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                                                      10, 25, 60, 120, 300});
  series_.loss = &loss_->Add(labels);
  series_.eval_loss = nullptr;
  series_.mfu = &mfu_->Add(labels);
  series_.step = &step_->Add(labels);
}

void WorkerMetrics::RemoveRolloutSeries() {
  JobSeries::Rollout& r = series_.rollout;
  if (r.reward_mean == nullptr) return;
  rollout_reward_mean_->Remove(r.reward_mean);
  rollout_reward_std_->Remove(r.reward_std);
  rollout_length_mean_->Remove(r.length_mean);
  rollout_length_max_->Remove(r.length_max);
  rollout_truncated_->Remove(r.truncated);
  rollout_tokens_per_second_->Remove(r.tokens_per_second);
  rollout_seconds_->Remove(r.rollout_seconds);
  train_compute_seconds_->Remove(r.train_seconds);
  r = JobSeries::Rollout();
}

void WorkerMetrics::OnRollout(const RolloutReport& rollout) {
  JobSeries::Rollout& r = series_.rollout;
  if (r.reward_mean == nullptr) {
    const prometheus::Labels labels = {{kJobIdLabel, job_}};
    r.reward_mean = &rollout_reward_mean_->Add(labels);
    r.reward_std = &rollout_reward_std_->Add(labels);
    r.length_mean = &rollout_length_mean_->Add(labels);
    r.length_max = &rollout_length_max_->Add(labels);
    r.truncated = &rollout_truncated_->Add(labels);
    r.tokens_per_second = &rollout_tokens_per_second_->Add(labels);
    r.rollout_seconds = &rollout_seconds_->Add(labels);
    r.train_seconds = &train_compute_seconds_->Add(labels);
  }
  r.reward_mean->Set(rollout.reward_mean);
  r.reward_std->Set(rollout.reward_std);
  r.length_mean->Set(rollout.completion_length_mean);
  r.length_max->Set(static_cast<double>(rollout.completion_length_max));
  r.truncated->Set(rollout.truncated_fraction);
  r.tokens_per_second->Set(rollout.rollout_tokens_per_second);
  if (rollout.rollout_seconds > 0) r.rollout_seconds->Increment(rollout.rollout_seconds);
  if (rollout.train_seconds > 0) r.train_seconds->Increment(rollout.train_seconds);
}

void WorkerMetrics::OnStep(const std::string& job_id, const StepReport& report) {
  absl::MutexLock lock(&mu_);
  SwitchJob(job_id);
  series_.tokens_total->Increment(static_cast<double>(report.tokens));
  series_.tokens_per_second->Set(report.tokens_per_second);
  series_.step_seconds->Observe(report.step_seconds);
  series_.loss->Set(report.loss);
  if (report.eval_step > 0) {
    if (series_.eval_loss == nullptr) series_.eval_loss = &eval_loss_->Add({{kJobIdLabel, job_}});
    series_.eval_loss->Set(report.eval_loss);
  }
  series_.mfu->Set(report.mfu);
  series_.step->Set(static_cast<double>(report.step));
  if (report.rollout.present) OnRollout(report.rollout);
  SetMemory(report.current_bytes, report.peak_bytes);
  host_.current->Set(static_cast<double>(report.host_tier_bytes));
  host_.peak->Set(
      static_cast<double>(std::max(report.host_tier_peak_bytes, report.host_tier_bytes)));
  disk_peak_ = std::max(disk_peak_, report.disk_tier_bytes);
  disk_.current->Set(static_cast<double>(report.disk_tier_bytes));
  disk_.peak->Set(static_cast<double>(disk_peak_));
  if (report.offload_copy_bytes > 0) {
    offload_copy_bytes_->Increment(static_cast<double>(report.offload_copy_bytes));
  }
  offload_copy_rate_->Set(OffloadCopyBytesPerSecond(report));
  if (report.offload_wait_seconds > 0)
    offload_wait_seconds_->Increment(report.offload_wait_seconds);
}

}  // namespace sbp
