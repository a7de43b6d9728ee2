// Trainer step reports -> the wire's JobProgress, with an ETA estimated from
// the steps this run has done so far.
#pragma once

#include <cstdint>

#include "streambp/v1/jobs.pb.h"
#include "worker/train/trainer.h"

namespace sbp {

// Seconds left: the mean time of the steps done since `first_step` times the
// steps remaining; -1 when nothing has been measured yet. 0 on the last step.
double EstimateEtaSeconds(int64_t step, int64_t total_steps, int64_t first_step,
                          double elapsed_seconds);

// The step's offload copy rate: copy bytes over the seconds the copies ran
// (0 when nothing was copied or no time was measured).
double OffloadCopyBytesPerSecond(const StepReport& report);

// Copies every figure of `report` (updated_at is left to the caller).
streambp::v1::JobProgress ToJobProgress(const StepReport& report, double eta_seconds);

}  // namespace sbp
