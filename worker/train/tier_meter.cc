#include "worker/train/tier_meter.h"

#include <string>

namespace sbp {

TierMeter::TierMeter(Backend& backend, const CheckpointStore* store,
                     const OptimizerState& optimizer, bool optimizer_offload)
    : backend_(backend),
      store_(store),
      optimizer_(optimizer),
      optimizer_offload_(optimizer_offload) {
  last_ = Now();
}

TierMeter::Totals TierMeter::Now() const {
  Totals t;
  if (store_ != nullptr) {
    const TransferQueue& queue = store_->queue();
    t.bytes += store_->moved_bytes();
    t.busy_seconds += queue.busy_seconds();
    t.wait_seconds += queue.wait_seconds();
  }
  t.bytes += optimizer_.offload_copied_bytes();
  t.busy_seconds += optimizer_.offload_busy_seconds();
  t.wait_seconds += optimizer_.offload_wait_seconds();
  return t;
}

void TierMeter::Fill(StepReport& report) {
  report.checkpoint_tier =
      std::string(CheckpointTierName(store_ ? store_->tier() : CheckpointTier::kDevice));
  report.optimizer_offload = optimizer_offload_;
  report.host_tier_bytes = backend_.host_allocator().current_bytes();
  report.host_tier_peak_bytes = backend_.host_allocator().peak_bytes();
  report.disk_tier_bytes = store_ ? store_->disk_bytes() : 0;
  const Totals now = Now();
  report.offload_copy_bytes = now.bytes - last_.bytes;
  report.offload_copy_seconds = now.busy_seconds - last_.busy_seconds;
  report.offload_wait_seconds = now.wait_seconds - last_.wait_seconds;
  last_ = now;
}

}  // namespace sbp
