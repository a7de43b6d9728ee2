// Hugging Face model directories: config.json plus model.safetensors (or
// model.safetensors.index.json and its shards). Loading checks every expected
// parameter (ParameterSpecs) for presence and shape before reading any data;
// saving writes a directory transformers can load with from_pretrained.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/allocator.h"
#include "kernels/tensor.h"
#include "worker/model/model_config.h"
#include "worker/model/safetensors.h"

namespace sbp {

// A model's configuration and its parameters as f32 host tensors, in
// ParameterSpecs order (a tied LM head is not stored separately).
struct ModelWeights {
  ModelConfig config;
  NamedTensors params;

  // nullptr when there is no parameter of that name.
  const Tensor* Find(absl::string_view name) const;
  Tensor* Find(absl::string_view name);
  // NotFound naming the parameter when absent.
  absl::StatusOr<Tensor> Get(absl::string_view name) const;
};

// Reads `dir/config.json` and the weights (converted to f32). Errors name the
// tensor: a missing one (NotFound, with its expected shape), a wrong shape
// (expected and found), or an unexpected extra tensor. Rotary `inv_freq`
// buffers are ignored, and so is an `lm_head.weight` of a tied model when it
// equals the embedding.
absl::StatusOr<ModelWeights> LoadModelDirectory(const std::string& dir, Allocator& allocator);

// Checks that `params` are exactly the parameters of `config` (names and
// shapes, any order, no extras).
absl::Status CheckModelParameters(const ModelConfig& config, const NamedTensors& params);

// Writes `dir/config.json` and the weights stored as `storage` (kF32 or
// kBF16) with metadata {"format": "pt"}: one model.safetensors, or shards of
// at most `max_shard_bytes` plus an index when the weights are larger
// (0 = always one file). A new directory appears atomically (built under a
// temporary name, then renamed); in an existing one each file is replaced
// atomically, config.json last, and weight files of the other layout are
// removed.
absl::Status SaveModelDirectory(const std::string& dir, const ModelConfig& config,
                                const NamedTensors& params, DType storage,
                                int64_t max_shard_bytes = 0);
inline absl::Status SaveModelDirectory(const std::string& dir, const ModelWeights& weights,
                                       DType storage, int64_t max_shard_bytes = 0) {
  return SaveModelDirectory(dir, weights.config, weights.params, storage, max_shard_bytes);
}

// Fresh weights like Hugging Face's _init_weights: embedding, projection and
// LM head weights ~ N(0, 0.02), norm weights = 1. Biases (Qwen2 q/k/v) are
// drawn from N(0, 0.02) instead of HF's zeros so that tests exercise them.
// Parameter i (in ParameterSpecs order) uses seed HashIndex(seed, i), so each
// tensor is independent and reproducible.
absl::StatusOr<ModelWeights> InitModelWeights(const ModelConfig& config, uint64_t seed,
                                              Allocator& allocator);

}  // namespace sbp
