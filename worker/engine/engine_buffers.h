// Small helpers shared by the engine's passes (engine.cc, engine_ulysses.cc).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_config.h"

namespace sbp::engine_internal {

// Activations in the backend's storage dtype; per-row statistics in f32.
inline absl::StatusOr<Tensor> Make(Backend& backend, Shape shape, const std::string& what) {
  return Tensor::Empty(backend.allocator(), std::move(shape), backend.activation_dtype(), what);
}
inline absl::StatusOr<Tensor> MakeF32(Backend& backend, Shape shape, const std::string& what) {
  return Tensor::Empty(backend.allocator(), std::move(shape), DType::kF32, what);
}

// A LoRA run's base norms are frozen (undefined gradients), but the norm
// backward always accumulates a weight gradient: it goes into `discard`,
// whose values are never read.
inline Tensor NormGradOrDiscard(const Tensor& grad, const Tensor& discard, int64_t n) {
  return grad.defined() ? grad : discard.Rows(0, n);
}
inline LayerWeights WithFrozenNorms(LayerWeights g, const Tensor& discard, const ModelConfig& c) {
  if (!discard.defined()) return g;
  g.input_norm = NormGradOrDiscard(g.input_norm, discard, c.hidden_size);
  g.post_norm = NormGradOrDiscard(g.post_norm, discard, c.hidden_size);
  if (c.qk_norm) {
    g.q_norm = NormGradOrDiscard(g.q_norm, discard, c.head_dim);
    g.k_norm = NormGradOrDiscard(g.k_norm, discard, c.head_dim);
  }
  return g;
}

}  // namespace sbp::engine_internal
