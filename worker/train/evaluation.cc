#include "worker/train/evaluation.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/batch.h"

namespace sbp {
namespace {

// Sequences per forward call: bounds the host copies, not the device memory
// (the engine runs one sequence at a time).
constexpr int64_t kEvalBlock = 16;

}  // namespace

absl::StatusOr<std::unique_ptr<Evaluator>> Evaluator::Create(const JobSpec& spec,
                                                             absl::string_view base_dir,
                                                             int64_t vocab_size) {
  absl::StatusOr<Dataset> loaded =
      Dataset::Load(Objective::kSft, ResolveJobPath(base_dir, spec.eval.data),
                    DataOptionsForJob(spec, vocab_size));
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat("eval.data: ", loaded.status().message()));
  }
  if (loaded->objective() != Objective::kSft) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval.data: '", spec.eval.data, "' holds ", ObjectiveName(loaded->objective()),
                     " examples; the validation loss needs SFT token sequences"));
  }
  const int64_t examples = spec.eval.max_examples > 0
                               ? std::min(spec.eval.max_examples, loaded->size())
                               : loaded->size();
  int64_t valid_targets = 0;
  for (int64_t i = 0; i < examples; ++i) valid_targets += CountValidTargets(loaded->SftAt(i));
  if (valid_targets == 0) {
    return absl::InvalidArgumentError(absl::StrCat("eval.data: '", spec.eval.data,
                                                   "' has no target with a loss in its first ",
                                                   examples, " examples (every label is -100)"));
  }
  return std::unique_ptr<Evaluator>(
      new Evaluator(*std::move(loaded), examples, valid_targets, spec.eval.every_steps));
}

bool Evaluator::Due(int64_t step, int64_t total_steps) const {
  return step == total_steps || (every_steps_ > 0 && step % every_steps_ == 0);
}

absl::StatusOr<EvalResult> Evaluator::Run(Engine& engine, const ModelTensors& weights,
                                          Communicator* comm) const {
  const int rank = comm != nullptr ? comm->rank() : 0;
  const int world_size = comm != nullptr ? comm->world_size() : 1;
  double loss = 0;
  std::vector<TokenSequence> block;
  auto flush = [&]() -> absl::Status {
    if (block.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(const BatchResult r, SftForward(engine, weights, block, valid_targets_));
    loss += r.loss;
    block.clear();
    return absl::OkStatus();
  };
  int64_t mine = 0;
  for (int64_t i = rank; i < examples_; i += world_size, ++mine) {
    block.push_back(dataset_.SftAt(i));
    if (static_cast<int64_t>(block.size()) == kEvalBlock) RETURN_IF_ERROR(flush());
  }
  // ZeRO-3 gathers weights in every pass, with every rank: a rank one
  // example short runs a one-token sequence, which has no target and adds
  // nothing to the loss.
  const int64_t most = (examples_ + world_size - 1) / world_size;
  if (engine.weight_source() != nullptr && mine < most) {
    TokenSequence empty;
    empty.input_ids = {0};
    empty.labels = {-100};
    block.push_back(std::move(empty));
  }
  RETURN_IF_ERROR(flush());
  if (comm != nullptr && world_size > 1) RETURN_IF_ERROR(comm->AllReduce(&loss, 1, ReduceOp::kSum));
  return EvalResult{loss, examples_, valid_targets_};
}

}  // namespace sbp
