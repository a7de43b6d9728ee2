// Autoregressive generation with a KV cache, the engine's inference path
// (rollouts for online GRPO, `sbp generate`).
//
// A prompt is prefilled through every layer in query chunks with the
// training forward's own pieces (decoder_layer.h), its keys and values
// written straight into the sequence's cache. Each decode step then runs one
// new token of every live sequence as one batch: the projections and the MLP
// are GEMMs over the batch's rows, while RoPE and attention run per row, at
// that sequence's position, over that sequence's cache. Both return logits
// in f32, so decode logits equal the full-sequence forward's at every
// position to fp32 rounding (decoder_test.cc).
//
// Memory: a sequence's cache is L x capacity x Hkv x d x 2 (K and V) in the
// backend's activation dtype (KvCache::Bytes); a prefill holds two
// [prompt, H] hidden buffers and one query chunk's activations; a step
// holds O(batch) rows of activations and the [batch, V] logits.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/rope_table.h"
#include "worker/engine/layer_buffers.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_config.h"

namespace sbp {

// One sequence's keys and values in every layer: k, v [capacity, Hkv, d].
struct KvCache {
  std::vector<KvBuffers> layers;
  int64_t length = 0;  // rows filled (the next token's position)

  int64_t capacity() const { return layers.empty() ? 0 : layers[0].k.dim(0); }
  static absl::StatusOr<KvCache> Allocate(Backend& backend, const ModelConfig& config,
                                          int64_t capacity);
  // Bytes of one cache of `capacity` rows, each element `element_bytes`.
  static int64_t Bytes(const ModelConfig& config, int64_t capacity, int64_t element_bytes);
};

class Decoder {
 public:
  // `prefill_chunk_tokens`: query rows per prefill chunk (0: AutoChunkTokens).
  Decoder(const ModelConfig& config, Backend& backend, int64_t prefill_chunk_tokens = 0);

  // Runs `prompt` (ids in [0, V), 1 <= size <= the cache's capacity) into an
  // empty cache; `logits` [1, V] f32 (backend memory) <- the logits of the
  // prompt's last position, which predict the first new token.
  absl::Status Prefill(const ModelTensors& weights, const std::vector<int32_t>& prompt,
                       KvCache& cache, Tensor& logits);

  // One token per sequence: tokens[r] enters caches[r] at its length (which
  // then grows by one; each cache must have room); `logits` [B, V] f32 <-
  // row r's next-token logits. Distinct caches only.
  absl::Status Step(const ModelTensors& weights, const std::vector<int32_t>& tokens,
                    const std::vector<KvCache*>& caches, Tensor& logits);

  const ModelConfig& config() const { return config_; }
  Backend& backend() const { return backend_; }

 private:
  // logits [n, V] f32 <- the LM head over hidden rows [n, H].
  absl::Status Head(const ModelTensors& weights, const Tensor& hidden, Tensor& logits);

  const ModelConfig config_;
  const RopeTable rope_;
  Backend& backend_;
  int64_t prefill_chunk_tokens_;
};

}  // namespace sbp
