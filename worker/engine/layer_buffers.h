// Buffers of one decoder layer's computation.
//
// KvBuffers hold the whole sequence's keys and values of one layer (StreamBP
// computes them once per layer, then runs the queries chunk by chunk), and
// the dK/dV accumulators of its backward. ChunkActivations hold everything a
// chunk of query rows produces, sized for `rows` and reused chunk after chunk
// (rows C, hidden H, heads Hq/Hkv, head dim d, intermediate I):
//
//   xn      [C, H]       input RMSNorm output          (later: dxn)
//   x_rstd  [C]          1/rms of the input rows
//   q_pre   [C, Hq, d]   q before q_norm (qk_norm models)
//   q_rstd  [C*Hq]       per-head 1/rms of q (qk_norm models)
//   q       [C, Hq, d]   q after norm and rope
//   attn    [C, Hq*d]    attention output
//   lse     [C, Hq]      attention logsumexp
//   h       [C, H]       residual after attention
//   h_rstd  [C]          1/rms of h
//   hn      [C, H]       post-attention RMSNorm output (later: dhn, dh)
//   gate/up [C, I]       MLP projections (later: dgate/dup)
//   act     [C, I]       silu(gate)*up (later: dact)
//   d_attn  [C, Hq*d]    gradient of attn (backward only)
//   dq      [C, Hq, d]   gradient of q (backward only)
//   lora_u, lora_t, lora_t2  [C, r]  LoRA low-rank scratch (rank r > 0 only)
//   q_sp, out_sp [P*C, Hq/P, d], lse_sp [P*C, Hq/P]  the attention's inputs
//                        and outputs in the head-split layout of sequence
//                        parallelism over P ranks (ulysses_attention.h; P > 1 only)
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/model/model_config.h"

namespace sbp {

struct KvBuffers {
  Tensor k_pre;   // [T, Hkv, d] before k_norm (qk_norm models)
  Tensor k_rstd;  // [T*Hkv] (qk_norm models)
  Tensor k;       // [T, Hkv, d] after norm and rope
  Tensor v;       // [T, Hkv, d]

  static absl::StatusOr<KvBuffers> Allocate(Backend& backend, const ModelConfig& config,
                                            int64_t tokens, const std::string& what);
  KvBuffers Rows(int64_t begin, int64_t end) const;
};

struct KvGrads {
  Tensor dk;  // [T, Hkv, d], accumulated over query chunks
  Tensor dv;  // [T, Hkv, d]

  static absl::StatusOr<KvGrads> Allocate(Backend& backend, const ModelConfig& config,
                                          int64_t tokens);
};

struct ChunkActivations {
  Tensor xn, x_rstd, q_pre, q_rstd, q, attn, lse, h, h_rstd, hn, gate, up, act;
  Tensor d_attn, dq;               // defined when allocated for backward
  Tensor lora_u, lora_t, lora_t2;  // defined for LoRA (lora_t, lora_t2: backward)
  Tensor q_sp, out_sp, lse_sp;     // defined for sequence parallelism
  int64_t sp_blocks = 1;           // P

  static absl::StatusOr<ChunkActivations> Allocate(Backend& backend, const ModelConfig& config,
                                                   int64_t rows, bool for_backward,
                                                   const std::string& what, int64_t lora_rank = 0,
                                                   int64_t sequence_parallel = 1);
  // The first `rows` rows of every buffer (a shorter last chunk).
  ChunkActivations Rows(int64_t rows) const;
};

}  // namespace sbp
