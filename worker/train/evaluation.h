// The validation loss of a job with `eval:` (job_spec.h EvalSpec): the mean
// causal-LM loss over every valid target of the eval set,
//   eval_loss = sum over examples e, targets t of -log p(t) / (valid targets),
// computed with the engine's chunked forward (nothing is kept for a
// backward). Under ZeRO-2 each rank runs examples rank, rank + N, ... and the
// sums are all-reduced, so every rank gets the same figure; the normaliser is
// counted over the whole set first, as for a training step.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/dist/communicator.h"
#include "worker/engine/engine.h"
#include "worker/train/dataset.h"
#include "worker/train/job_spec.h"

namespace sbp {

struct EvalResult {
  double loss = 0;
  int64_t examples = 0;       // over all ranks
  int64_t valid_targets = 0;  // the normaliser
};

class Evaluator {
 public:
  // Loads spec.eval.data (relative paths from `base_dir`) for a model with
  // `vocab_size` tokens. Errors name eval.data; an eval set without a single
  // target with a loss is refused.
  static absl::StatusOr<std::unique_ptr<Evaluator>> Create(const JobSpec& spec,
                                                           absl::string_view base_dir,
                                                           int64_t vocab_size);

  // True when the loss is due after `step` of `total_steps`.
  bool Due(int64_t step, int64_t total_steps) const;

  // The loss of `weights` (with whatever adapters they carry). `comm` is null
  // on a single worker.
  absl::StatusOr<EvalResult> Run(Engine& engine, const ModelTensors& weights,
                                 Communicator* comm) const;

  int64_t examples() const { return examples_; }

 private:
  Evaluator(Dataset dataset, int64_t examples, int64_t valid_targets, int64_t every_steps)
      : dataset_(std::move(dataset)),
        examples_(examples),
        valid_targets_(valid_targets),
        every_steps_(every_steps) {}

  Dataset dataset_;
  int64_t examples_;  // the first `examples_` of the file
  int64_t valid_targets_;
  int64_t every_steps_;
};

}  // namespace sbp
