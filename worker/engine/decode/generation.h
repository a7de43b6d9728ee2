// Batched autoregressive generation over the decoder (decoder.h): every
// request is prefilled, then all live sequences advance one token per step
// together until each stops at an EOS token, a stop sequence or its
// max_new_tokens.
//
// Memory: the KV caches of every request of a call are allocated up front
// (prompt + max_new_tokens rows each, KvCache::Bytes) and freed when the
// call returns, so decoding and training never hold them at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/decode/decoder.h"
#include "worker/engine/decode/sampler.h"

namespace sbp {

enum class FinishReason { kEos, kStop, kLength };
const char* FinishReasonName(FinishReason reason);  // "eos", "stop", "length"

struct GenerationOptions {
  int64_t max_new_tokens = 256;
  SamplingOptions sampling;
  std::vector<int32_t> eos_token_ids;                // any of them ends a sequence
  std::vector<std::vector<int32_t>> stop_sequences;  // any of them, once generated, ends it
  // Sequences decoded together per step (0: every request of the call).
  int64_t max_batch = 0;
};

absl::Status CheckGenerationOptions(const GenerationOptions& options, int64_t vocab_size);

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplerStream stream{0};  // this sequence's random stream
};

struct Generation {
  // The new tokens, including the EOS token or stop sequence that ended them.
  std::vector<int32_t> ids;
  std::vector<float> logprobs;  // per new token (sampler.h)
  FinishReason finish = FinishReason::kLength;
  size_t stop_length = 0;  // tokens of the stop sequence that ended it (kStop)
  // ids without the EOS token or stop sequence at the end.
  std::vector<int32_t> content() const;
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t new_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int64_t kv_cache_bytes = 0;  // the caches of the call, all at once
};

// One Generation per request, in order. Fails (nothing generated) when a
// prompt is empty, holds an id outside the vocabulary, or the caches do not
// fit the backend's allocator (ResourceExhausted naming them).
absl::StatusOr<std::vector<Generation>> Generate(Decoder& decoder, const ModelTensors& weights,
                                                 std::vector<GenerationRequest> requests,
                                                 const GenerationOptions& options,
                                                 GenerationStats* stats = nullptr);

}  // namespace sbp
