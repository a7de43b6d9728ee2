#include "worker/engine/layer_buffers.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sbp {
namespace {

// Activations in the backend's storage dtype; per-row statistics and the
// dK/dV accumulators (summed over every query chunk) in f32.
absl::StatusOr<Tensor> Make(Backend& backend, Shape shape, const std::string& what,
                            absl::string_view name) {
  return Tensor::Empty(backend.allocator(), std::move(shape), backend.activation_dtype(),
                       absl::StrCat(what, " ", name));
}
absl::StatusOr<Tensor> MakeF32(Backend& backend, Shape shape, const std::string& what,
                               absl::string_view name) {
  return Tensor::Empty(backend.allocator(), std::move(shape), DType::kF32,
                       absl::StrCat(what, " ", name));
}

Tensor FirstRows(const Tensor& t, int64_t rows) { return t.defined() ? t.Rows(0, rows) : t; }

}  // namespace

absl::StatusOr<KvBuffers> KvBuffers::Allocate(Backend& backend, const ModelConfig& c,
                                              int64_t tokens, const std::string& what) {
  KvBuffers kv;
  const Shape shape = {tokens, c.num_key_value_heads, c.head_dim};
  if (c.qk_norm) {
    ASSIGN_OR_RETURN(kv.k_pre, Make(backend, shape, what, "k before norm"));
    ASSIGN_OR_RETURN(kv.k_rstd, MakeF32(backend, {tokens, c.num_key_value_heads}, what, "k rstd"));
  }
  ASSIGN_OR_RETURN(kv.k, Make(backend, shape, what, "K"));
  ASSIGN_OR_RETURN(kv.v, Make(backend, shape, what, "V"));
  return kv;
}

KvBuffers KvBuffers::Rows(int64_t begin, int64_t end) const {
  KvBuffers kv;
  if (k_pre.defined()) kv.k_pre = k_pre.Rows(begin, end);
  if (k_rstd.defined()) kv.k_rstd = k_rstd.Rows(begin, end);
  kv.k = k.Rows(begin, end);
  kv.v = v.Rows(begin, end);
  return kv;
}

absl::StatusOr<KvGrads> KvGrads::Allocate(Backend& backend, const ModelConfig& c, int64_t tokens) {
  KvGrads g;
  const Shape shape = {tokens, c.num_key_value_heads, c.head_dim};
  ASSIGN_OR_RETURN(g.dk, MakeF32(backend, shape, "backward", "dK"));
  ASSIGN_OR_RETURN(g.dv, MakeF32(backend, shape, "backward", "dV"));
  return g;
}

absl::StatusOr<ChunkActivations> ChunkActivations::Allocate(Backend& backend, const ModelConfig& c,
                                                            int64_t rows, bool for_backward,
                                                            const std::string& what,
                                                            int64_t lora_rank,
                                                            int64_t sequence_parallel) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const int64_t Hq = c.num_attention_heads, d = c.head_dim;
  ChunkActivations a;
  ASSIGN_OR_RETURN(a.xn, Make(backend, {rows, H}, what, "normed input"));
  ASSIGN_OR_RETURN(a.x_rstd, MakeF32(backend, {rows}, what, "input rstd"));
  if (c.qk_norm) {
    ASSIGN_OR_RETURN(a.q_pre, Make(backend, {rows, Hq, d}, what, "q before norm"));
    ASSIGN_OR_RETURN(a.q_rstd, MakeF32(backend, {rows, Hq}, what, "q rstd"));
  }
  ASSIGN_OR_RETURN(a.q, Make(backend, {rows, Hq, d}, what, "q"));
  ASSIGN_OR_RETURN(a.attn, Make(backend, {rows, Hq * d}, what, "attention output"));
  ASSIGN_OR_RETURN(a.lse, MakeF32(backend, {rows, Hq}, what, "attention lse"));
  ASSIGN_OR_RETURN(a.h, Make(backend, {rows, H}, what, "residual"));
  ASSIGN_OR_RETURN(a.h_rstd, MakeF32(backend, {rows}, what, "post-attention rstd"));
  ASSIGN_OR_RETURN(a.hn, Make(backend, {rows, H}, what, "post-attention norm"));
  ASSIGN_OR_RETURN(a.gate, Make(backend, {rows, I}, what, "gate"));
  ASSIGN_OR_RETURN(a.up, Make(backend, {rows, I}, what, "up"));
  ASSIGN_OR_RETURN(a.act, Make(backend, {rows, I}, what, "swiglu"));
  if (for_backward) {
    ASSIGN_OR_RETURN(a.d_attn, Make(backend, {rows, Hq * d}, what, "d attention"));
    ASSIGN_OR_RETURN(a.dq, Make(backend, {rows, Hq, d}, what, "dq"));
  }
  if (lora_rank > 0) {
    ASSIGN_OR_RETURN(a.lora_u, Make(backend, {rows, lora_rank}, what, "LoRA x A^T"));
    if (for_backward) {
      ASSIGN_OR_RETURN(a.lora_t, Make(backend, {rows, lora_rank}, what, "LoRA dy B"));
      ASSIGN_OR_RETURN(a.lora_t2, Make(backend, {rows, lora_rank}, what, "LoRA dy B"));
    }
  }
  if (sequence_parallel > 1) {
    // The head-split layout: P blocks of `rows` rows, Hq / P heads.
    const int64_t P = sequence_parallel, heads = Hq / P;
    a.sp_blocks = P;
    ASSIGN_OR_RETURN(a.q_sp, Make(backend, {P * rows, heads, d}, what, "head-split q"));
    ASSIGN_OR_RETURN(a.out_sp,
                     Make(backend, {P * rows, heads, d}, what, "head-split attention output"));
    ASSIGN_OR_RETURN(a.lse_sp, MakeF32(backend, {P * rows, heads}, what, "head-split lse"));
  }
  return a;
}

ChunkActivations ChunkActivations::Rows(int64_t rows) const {
  ChunkActivations a;
  for (auto [dst, src] : {std::pair{&a.xn, &xn},
                          {&a.x_rstd, &x_rstd},
                          {&a.q_pre, &q_pre},
                          {&a.q_rstd, &q_rstd},
                          {&a.q, &q},
                          {&a.attn, &attn},
                          {&a.lse, &lse},
                          {&a.h, &h},
                          {&a.h_rstd, &h_rstd},
                          {&a.hn, &hn},
                          {&a.gate, &gate},
                          {&a.up, &up},
                          {&a.act, &act},
                          {&a.d_attn, &d_attn},
                          {&a.dq, &dq},
                          {&a.lora_u, &lora_u},
                          {&a.lora_t, &lora_t},
                          {&a.lora_t2, &lora_t2}}) {
    *dst = FirstRows(*src, rows);
  }
  a.sp_blocks = sp_blocks;
  for (auto [dst, src] : {std::pair{&a.q_sp, &q_sp}, {&a.out_sp, &out_sp}, {&a.lse_sp, &lse_sp}}) {
    *dst = FirstRows(*src, sp_blocks * rows);
  }
  return a;
}

}  // namespace sbp
