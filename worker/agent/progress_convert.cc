#include "worker/agent/progress_convert.h"

namespace sbp {

double EstimateEtaSeconds(int64_t step, int64_t total_steps, int64_t first_step,
                          double elapsed_seconds) {
  if (total_steps > 0 && step >= total_steps) return 0;
  const int64_t done = step - first_step + 1;
  if (done <= 0 || elapsed_seconds <= 0) return -1;
  return elapsed_seconds / static_cast<double>(done) * static_cast<double>(total_steps - step);
}

double OffloadCopyBytesPerSecond(const StepReport& report) {
  if (report.offload_copy_bytes <= 0 || !(report.offload_copy_seconds > 0)) return 0;
  return static_cast<double>(report.offload_copy_bytes) / report.offload_copy_seconds;
}

streambp::v1::JobProgress ToJobProgress(const StepReport& report, double eta_seconds) {
  streambp::v1::JobProgress p;
  p.set_step(report.step);
  p.set_total_steps(report.total_steps);
  p.set_loss(report.loss);
  p.set_learning_rate(report.lr);
  p.set_grad_norm(report.grad_norm);
  p.set_tokens_per_second(report.tokens_per_second);
  p.set_tokens_total(report.tokens_total);
  p.set_mfu(report.mfu);
  p.set_peak_bytes(report.peak_bytes);
  p.set_current_bytes(report.current_bytes);
  p.set_step_seconds(report.step_seconds);
  p.set_eta_seconds(eta_seconds);
  p.set_eval_step(report.eval_step);
  p.set_eval_loss(report.eval_loss);
  p.set_checkpoint_tier(report.checkpoint_tier);
  p.set_optimizer_offload(report.optimizer_offload);
  p.set_host_tier_bytes(report.host_tier_bytes);
  p.set_host_tier_peak_bytes(report.host_tier_peak_bytes);
  p.set_disk_tier_bytes(report.disk_tier_bytes);
  p.set_offload_copy_bytes_per_second(OffloadCopyBytesPerSecond(report));
  p.set_offload_wait_seconds(report.offload_wait_seconds);
  if (report.rollout.present) {
    const RolloutReport& r = report.rollout;
    streambp::v1::RolloutProgress* rollout = p.mutable_rollout();
    rollout->set_reward_mean(r.reward_mean);
    rollout->set_reward_std(r.reward_std);
    rollout->set_completion_length_mean(r.completion_length_mean);
    rollout->set_completion_length_max(r.completion_length_max);
    rollout->set_truncated_fraction(r.truncated_fraction);
    rollout->set_rollout_tokens_per_second(r.rollout_tokens_per_second);
    rollout->set_rollout_seconds(r.rollout_seconds);
    rollout->set_train_seconds(r.train_seconds);
  }
  return p;
}

}  // namespace sbp
