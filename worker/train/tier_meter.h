// A step's figures of the memory tiers for its StepReport: the host memory
// they hold (the backend's host allocator: pinned on CUDA), the disk tier's
// file, and the copies of the checkpoint store's and the offloaded
// optimizer's queues since the previous step.
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "worker/engine/offload/checkpoint_store.h"
#include "worker/train/optimizer_state.h"
#include "worker/train/trainer.h"

namespace sbp {

class TierMeter {
 public:
  // `store` may be null (the device tier); all three outlive the meter.
  TierMeter(Backend& backend, const CheckpointStore* store, const OptimizerState& optimizer,
            bool optimizer_offload);

  // Fills the report's tier fields with the figures since the last call.
  void Fill(StepReport& report);

 private:
  struct Totals {
    int64_t bytes = 0;
    double busy_seconds = 0, wait_seconds = 0;
  };
  Totals Now() const;

  Backend& backend_;
  const CheckpointStore* store_;
  const OptimizerState& optimizer_;
  bool optimizer_offload_;
  Totals last_;
};

}  // namespace sbp
