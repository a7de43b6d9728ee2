// One optimizer step's forward and backward for each objective: the examples
// of the step are split into micro-batches of `micro_batch_sequences`, and
// every normaliser (valid targets for SFT, pairs for DPO, completion tokens or
// sequences for GRPO) is counted over the whole step before the first
// micro-batch runs, so accumulation is exact. Under ZeRO-2 each rank runs its
// share of the step's examples and the counts are summed over all ranks
// (all-reduce) first, so the loss is the global mean.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "worker/dist/communicator.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/train/dataset.h"
#include "worker/train/job_spec.h"
#include "worker/train/rollout/rollout.h"

namespace sbp {

// Every figure is this rank's share: summing them over the ranks gives the
// step's figure (the loss and the extra figures are already divided by the
// global normalisers).
struct ObjectiveStepResult {
  double loss = 0;
  int64_t tokens = 0;      // tokens run through the policy's forward + backward
  double model_flops = 0;  // TrainingFlops of those sequences
  nlohmann::json extra = nlohmann::json::object();  // numbers only
  std::optional<RolloutStats> rollout;              // online GRPO: this rank's sampling
};

class StepObjective {
 public:
  virtual ~StepObjective() = default;
  // Gradients of the step's mean loss over `indices` ACCUMULATE into `grads`.
  virtual absl::StatusOr<ObjectiveStepResult> Run(const std::vector<int64_t>& indices,
                                                  ModelTensors& grads) = 0;
  // The optimizer step the next Run belongs to (online sampling draws from it).
  void set_step(int64_t step) { step_ = step; }

 protected:
  int64_t step_ = 0;
};

// `reference` is null when the objective needs none; `comm` is null on a
// single worker; `rollouts` samples online GRPO's completions (required
// when spec.grpo.online(), else null).
absl::StatusOr<std::unique_ptr<StepObjective>> MakeStepObjective(
    const JobSpec& spec, const Dataset& dataset, Engine& engine, const ModelTensors& weights,
    Engine& reference_engine, const ModelTensors* reference, Communicator* comm = nullptr,
    RolloutSampler* rollouts = nullptr);

}  // namespace sbp
