// AdamW over a ParameterStore: the first and second moments live in two
// stores of the same layout; the weights themselves are the fp32 master
// weights. Norm weights and biases get no weight decay (as Hugging Face's
// Trainer does). Global-norm clipping scales the gradient inside the update.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cpu/embedding_rows.h"
#include "worker/engine/parameter_store.h"
#include "worker/train/job_spec.h"

namespace sbp {

class AdamWOptimizer {
 public:
  // Zero moments in f32 with `layout`'s layout, on `backend`'s device.
  static absl::StatusOr<AdamWOptimizer> Create(const ParameterStore& layout, Backend& backend,
                                               const TrainSpec& train);

  // sqrt(sum of squares) over every gradient. With `embed_rows` (the CPU's
  // row set, kernels/cpu/embedding_rows.h) the embedding's gradient is those
  // rows, its group in `grads` left without memory; the norm is the dense
  // gradient's bit for bit.
  static double GlobalGradNorm(Backend& backend, const ParameterStore& grads,
                               const cpu::EmbeddingRowGradient* embed_rows = nullptr);

  // One update with learning rate `lr` at 1-based `step`; gradients are
  // multiplied by `grad_scale` first (clipping). Returns nothing; moments and
  // weights change in place. `embed_rows` as for GlobalGradNorm (the update
  // is the dense gradient's bit for bit).
  void Step(ParameterStore& weights, const ParameterStore& grads, double lr, int64_t step,
            float grad_scale, const cpu::EmbeddingRowGradient* embed_rows = nullptr);

  ParameterStore& exp_avg() { return m_; }
  ParameterStore& exp_avg_sq() { return v_; }

 private:
  AdamWOptimizer(Backend& backend, const TrainSpec& train, ParameterStore m, ParameterStore v)
      : backend_(&backend), train_(train), m_(std::move(m)), v_(std::move(v)) {}

  Backend* backend_;
  TrainSpec train_;
  ParameterStore m_;
  ParameterStore v_;
};

// The AdamW hyper-parameters of one update (weight decay left at 0: it
// depends on the parameter, see WeightDecayFor).
AdamWParams AdamWStepParams(const TrainSpec& train, double lr, int64_t step, float grad_scale);

// min(1, max_norm / (norm + 1e-6)); 1 when max_norm is 0 (no clipping).
float ClipScale(double grad_norm, double max_norm);

}  // namespace sbp
