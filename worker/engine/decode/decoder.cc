#include "worker/engine/decode/decoder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/decoder_layer.h"
#include "worker/engine/engine.h"
#include "worker/engine/engine_buffers.h"
#include "worker/engine/lora_store.h"

namespace sbp {
namespace {

using engine_internal::Make;
using engine_internal::MakeF32;

// Host ids as a tensor on the backend's device (the same memory on the CPU).
absl::StatusOr<Tensor> DeviceIds(Backend& backend, const std::vector<int32_t>& ids) {
  Tensor host = Tensor::Wrap(const_cast<int32_t*>(ids.data()), {static_cast<int64_t>(ids.size())},
                             DType::kI32);
  if (backend.device().is_cpu()) return host;
  ASSIGN_OR_RETURN(
      Tensor t, Tensor::Empty(backend.allocator(), host.shape(), DType::kI32, "decode token ids"));
  backend.Copy(host, t);
  return t;
}

absl::Status CheckIds(const std::vector<int32_t>& ids, int64_t vocab, const char* what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "[", i, "] = ", ids[i], " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KvCache> KvCache::Allocate(Backend& backend, const ModelConfig& config,
                                          int64_t capacity) {
  if (capacity < 1) return absl::InvalidArgumentError("a KV cache needs at least one row");
  KvCache cache;
  const Shape shape = {capacity, config.num_key_value_heads, config.head_dim};
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    KvBuffers kv;
    ASSIGN_OR_RETURN(kv.k, Make(backend, shape, "KV cache K"));
    ASSIGN_OR_RETURN(kv.v, Make(backend, shape, "KV cache V"));
    cache.layers.push_back(std::move(kv));
  }
  return cache;
}

int64_t KvCache::Bytes(const ModelConfig& config, int64_t capacity, int64_t element_bytes) {
  return 2 * config.num_hidden_layers * capacity * config.num_key_value_heads * config.head_dim *
         element_bytes;
}

Decoder::Decoder(const ModelConfig& config, Backend& backend, int64_t prefill_chunk_tokens)
    : config_(config),
      rope_(config_.rope_table()),
      backend_(backend),
      prefill_chunk_tokens_(prefill_chunk_tokens) {}

absl::Status Decoder::Head(const ModelTensors& weights, const Tensor& hidden, Tensor& logits) {
  Backend& b = backend_;
  const int64_t n = hidden.dim(0), H = config_.hidden_size, V = config_.vocab_size;
  CHECK(logits.shape() == (Shape{n, V}) && logits.dtype() == DType::kF32)
      << "decoder logits must be f32 [" << n << ", " << V << "], got " << logits.DebugString();
  ASSIGN_OR_RETURN(Tensor normed, Make(b, {n, H}, "decode head normed hidden"));
  b.RmsNormForward(hidden, weights.final_norm, static_cast<float>(config_.rms_norm_eps), normed,
                   nullptr);
  if (b.activation_dtype() == DType::kF32) {
    b.MatmulXWt(normed, weights.lm_head, logits, false);
  } else {
    ASSIGN_OR_RETURN(Tensor stored, Make(b, {n, V}, "decode logits"));
    b.MatmulXWt(normed, weights.lm_head, stored, false);
    b.Cast(stored, logits);
  }
  return b.TakeDeferredError();
}

absl::Status Decoder::Prefill(const ModelTensors& weights, const std::vector<int32_t>& prompt,
                              KvCache& cache, Tensor& logits) {
  const int64_t T = static_cast<int64_t>(prompt.size()), H = config_.hidden_size;
  if (T < 1) return absl::InvalidArgumentError("an empty prompt has nothing to continue");
  if (cache.length != 0) return absl::FailedPreconditionError("prefill needs an empty KV cache");
  if (T > cache.capacity()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a prompt of ", T, " tokens does not fit a KV cache of ", cache.capacity(), " rows"));
  }
  RETURN_IF_ERROR(CheckIds(prompt, config_.vocab_size, "prompt"));
  Backend& b = backend_;
  const int64_t chunk =
      std::min(T, prefill_chunk_tokens_ > 0 ? prefill_chunk_tokens_ : AutoChunkTokens(config_, T));
  DecoderLayer layer(config_, rope_, b);
  ASSIGN_OR_RETURN(Tensor ids, DeviceIds(b, prompt));
  ASSIGN_OR_RETURN(Tensor x, Make(b, {T, H}, "prefill hidden states"));
  ASSIGN_OR_RETURN(Tensor y, Make(b, {T, H}, "prefill hidden states"));
  b.EmbeddingForward(weights.embed, ids, x);
  {
    ASSIGN_OR_RETURN(
        ChunkActivations acts,
        ChunkActivations::Allocate(b, config_, chunk, false, "prefill chunk", LoraRank(weights)));
    // k before its norm (qk_norm models): scratch of one chunk; K/V go to the cache.
    ASSIGN_OR_RETURN(KvBuffers scratch, KvBuffers::Allocate(b, config_, chunk, "prefill"));
    for (int l = 0; l < config_.num_hidden_layers; ++l) {
      const LayerWeights& w = weights.layers[l];
      const KvBuffers& layer_cache = cache.layers[l];
      for (int64_t s = 0; s < T; s += chunk) {
        const int64_t e = std::min(T, s + chunk);
        ChunkActivations a = acts.Rows(e - s);
        KvBuffers kv_rows = layer_cache.Rows(s, e);
        if (config_.qk_norm) {
          kv_rows.k_pre = scratch.k_pre.Rows(0, e - s);
          kv_rows.k_rstd = scratch.k_rstd.Rows(0, e - s);
        }
        layer.InputNorm(w, x.Rows(s, e), a);
        layer.KvForward(w, a, s, kv_rows);
        layer.ChunkForward(w, x.Rows(s, e), s, layer_cache.Rows(0, e), a, y.Rows(s, e));
      }
      std::swap(x, y);
    }
  }
  RETURN_IF_ERROR(Head(weights, x.Rows(T - 1, T), logits));
  cache.length = T;
  return absl::OkStatus();
}

absl::Status Decoder::Step(const ModelTensors& weights, const std::vector<int32_t>& tokens,
                           const std::vector<KvCache*>& caches, Tensor& logits) {
  const int64_t B = static_cast<int64_t>(tokens.size()), H = config_.hidden_size;
  if (B == 0) return absl::OkStatus();
  CHECK_EQ(tokens.size(), caches.size());
  RETURN_IF_ERROR(CheckIds(tokens, config_.vocab_size, "token"));
  std::vector<int64_t> positions(tokens.size());
  for (size_t r = 0; r < caches.size(); ++r) {
    if (caches[r]->length >= caches[r]->capacity()) {
      return absl::OutOfRangeError(absl::StrCat("sequence ", r, ": its KV cache of ",
                                                caches[r]->capacity(), " rows is full"));
    }
    positions[r] = caches[r]->length;
    for (size_t q = 0; q < r; ++q) {
      if (caches[q] == caches[r]) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequences ", q, " and ", r, " of a decode step share one KV cache"));
      }
    }
  }
  Backend& b = backend_;
  DecoderLayer layer(config_, rope_, b);
  ASSIGN_OR_RETURN(Tensor ids, DeviceIds(b, tokens));
  ASSIGN_OR_RETURN(Tensor x, Make(b, {B, H}, "decode hidden states"));
  ASSIGN_OR_RETURN(Tensor y, Make(b, {B, H}, "decode hidden states"));
  b.EmbeddingForward(weights.embed, ids, x);
  {
    ASSIGN_OR_RETURN(ChunkActivations a,
                     ChunkActivations::Allocate(b, config_, B, false, "decode", LoraRank(weights)));
    ASSIGN_OR_RETURN(KvBuffers new_kv, KvBuffers::Allocate(b, config_, B, "decode"));
    std::vector<KvBuffers*> layer_caches(caches.size());
    for (int l = 0; l < config_.num_hidden_layers; ++l) {
      for (size_t r = 0; r < caches.size(); ++r) layer_caches[r] = &caches[r]->layers[l];
      layer.DecodeForward(weights.layers[l], x, positions, layer_caches, a, new_kv, y);
      std::swap(x, y);
    }
  }
  RETURN_IF_ERROR(Head(weights, x, logits));
  for (KvCache* cache : caches) ++cache->length;
  return absl::OkStatus();
}

}  // namespace sbp
