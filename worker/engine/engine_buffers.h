// Small helpers shared by the engine's passes (engine.cc, engine_ulysses.cc).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_config.h"

namespace sbp::engine_internal {

// The weights one pass reads: the caller's views as they are, or, with a
// WeightSource, a copy whose groups the source binds between Use and Done.
// Groups still held when the pass ends early (an error) are released.
class PassWeights {
 public:
  PassWeights(WeightSource* source, const ModelTensors& weights, const ModelConfig& config)
      : source_(source), weights_(weights), config_(config) {}
  ~PassWeights() {
    if (source_ == nullptr) return;
    for (int group : held_) source_->Release(group).IgnoreError();
  }
  PassWeights(const PassWeights&) = delete;
  PassWeights& operator=(const PassWeights&) = delete;

  const ModelTensors& get() const { return weights_; }
  // Group `group` is about to be read; `next` is the one the pass reads after it.
  absl::Status Use(int group, int next) {
    if (source_ == nullptr) return absl::OkStatus();
    RETURN_IF_ERROR(source_->Acquire(group, next, weights_));
    held_.push_back(group);
    return absl::OkStatus();
  }
  absl::Status Done(int group) {
    if (source_ == nullptr) return absl::OkStatus();
    held_.erase(std::remove(held_.begin(), held_.end(), group), held_.end());
    return source_->Release(group);
  }
  // The embedding's group, then layer 0 (or the head).
  absl::Status UseEmbedding() { return Use(0, config_.num_hidden_layers > 0 ? 1 : final_group()); }
  // Layer `l`'s group, then layer l + 1 (or the head) going forward, l - 1
  // (or nothing) going backward.
  absl::Status UseLayer(int l, bool forward) {
    const int next = forward ? (l + 1 < config_.num_hidden_layers ? l + 2 : final_group()) : l;
    return Use(1 + l, next >= 1 ? next : -1);
  }
  absl::Status DoneLayer(int l) { return Done(1 + l); }
  // The LM head's groups (final, and the embedding that is its weight when
  // tied); `next` is the group after them (-1: none).
  absl::Status UseHead(int next) {
    if (!config_.tie_word_embeddings) return Use(final_group(), next);
    RETURN_IF_ERROR(Use(final_group(), 0));
    return Use(0, next);
  }
  absl::Status DoneHead() {
    if (config_.tie_word_embeddings) RETURN_IF_ERROR(Done(0));
    return Done(final_group());
  }

 private:
  int final_group() const { return config_.num_hidden_layers + 1; }

  WeightSource* source_;
  ModelTensors weights_;
  const ModelConfig& config_;
  std::vector<int> held_;
};

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
