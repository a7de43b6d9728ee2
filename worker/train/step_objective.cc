#include "worker/train/step_objective.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/batch.h"

namespace sbp {
namespace {

// Splits `items` into consecutive groups of at most `size`.
template <typename T>
std::vector<std::vector<T>> MicroBatches(const std::vector<T>& items, int64_t size) {
  std::vector<std::vector<T>> out;
  const size_t step = static_cast<size_t>(std::max<int64_t>(size, 1));
  for (size_t i = 0; i < items.size(); i += step) {
    out.emplace_back(items.begin() + i, items.begin() + std::min(items.size(), i + step));
  }
  return out;
}

class SftStep final : public StepObjective {
 public:
  SftStep(const JobSpec& spec, const Dataset& dataset, Engine& engine, const ModelTensors& w)
      : spec_(spec), dataset_(dataset), engine_(engine), weights_(w) {}

  absl::StatusOr<ObjectiveStepResult> Run(const std::vector<int64_t>& indices,
                                          ModelTensors& grads) override {
    std::vector<TokenSequence> step;
    for (int64_t i : indices) step.push_back(dataset_.sft()[i]);
    const int64_t normaliser = CountValidTargets(step);
    ObjectiveStepResult result;
    for (const auto& micro : MicroBatches(step, spec_.train.micro_batch_sequences)) {
      ASSIGN_OR_RETURN(BatchResult r,
                       SftForwardBackward(engine_, weights_, micro, grads, normaliser));
      result.loss += r.loss;
      result.tokens += r.tokens;
      for (const TokenSequence& s : micro) {
        result.model_flops += TrainingFlops(engine_.config(), static_cast<int64_t>(s.input_ids.size()));
      }
    }
    result.extra["valid_targets"] = normaliser;
    return result;
  }

 private:
  const JobSpec& spec_;
  const Dataset& dataset_;
  Engine& engine_;
  const ModelTensors& weights_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StepObjective>> MakeStepObjective(
    const JobSpec& spec, const Dataset& dataset, Engine& engine, const ModelTensors& weights,
    Engine& reference_engine, const ModelTensors* reference) {
  switch (spec.objective) {
    case Objective::kSft:
      return std::unique_ptr<StepObjective>(new SftStep(spec, dataset, engine, weights));
    case Objective::kDpo:
    case Objective::kGrpo:
      break;
  }
  return absl::UnimplementedError(
      absl::StrCat("objective '", ObjectiveName(spec.objective), "' is not available yet"));
}

}  // namespace sbp
