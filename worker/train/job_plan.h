// The memory planner's request for a job spec: its model, sequence length,
// mode, chunk sizes, precision, world size, sequence parallelism, objective
// and device, with the optimizer state counted (one rank's memory). Shared by the coordinator's
// admission and the trainer's automatic chunk sizes.
#pragma once

#include <string>

#include "worker/engine/planner.h"
#include "worker/model/model_config.h"
#include "worker/train/job_spec.h"

namespace sbp {

PlanRequest PlanRequestForSpec(const JobSpec& spec, const ModelConfig& config);

// The directory of the job's frozen reference model (DPO; GRPO with beta >
// 0), "" when it has none.
std::string ReferenceModelDir(const JobSpec& spec);

// True when a LoRA job's reference model is its own base (the default): the
// reference is then the frozen base weights without the adapters, as peft's
// disable_adapter gives it, and no second copy is loaded.
bool ReferenceIsLoraBase(const JobSpec& spec);

}  // namespace sbp
