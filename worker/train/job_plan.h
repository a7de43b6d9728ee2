// The memory planner's request for a job spec: its model, sequence length,
// mode, chunk sizes, precision, world size, objective and device, with the
// optimizer state counted. Shared by the coordinator's admission and the
// trainer's automatic chunk sizes.
#pragma once

#include "worker/engine/planner.h"
#include "worker/model/model_config.h"
#include "worker/train/job_spec.h"

namespace sbp {

PlanRequest PlanRequestForSpec(const JobSpec& spec, const ModelConfig& config);

}  // namespace sbp
