// Ulysses attention for one rank of a SequenceGroup of P ranks, inside
// StreamBP's chunked schedule.
//
// Rows: the sequence has T = P n rows; the rank at position p owns rows
// [p n, (p + 1) n), its "local rows", processed in chunk steps of c rows.
// Heads: the rank attends for query heads [p hq, (p + 1) hq), hq = Hq / P,
// whose hkv KV heads it holds for the whole sequence (hkv = Hkv / P; with P
// above Hkv, one KV head, replicated on P / Hkv ranks as Ulysses does).
//
// Schedule, per layer and chunk step s (every rank runs the same steps, so
// the collectives pair up):
//   ExchangeKv   local K/V rows [s, s + c) -> every rank (one all-to-all,
//                K and V together), filling the gathered K/V [T, hkv, d];
//   Forward      local queries of the step -> head-split (one all-to-all):
//                the rank then holds, for its heads, rows p' n + s .. + c of
//                every rank p', attends each block against the gathered K/V
//                with its own causal offset, and sends the outputs back (one
//                all-to-all);
//   Backward     the output gradient goes the same way, the attention
//                backward adds into the gathered dK/dV, dq comes back;
//   ReturnKvGrads  once every query step is done, the finished dK/dV rows
//                of step s go back to their owners (one all-to-all; the
//                replicas of a KV head are summed in rank order).
// Each all-to-all carries c x Hq x d elements (K/V: 2 c P hkv d) per rank.
//
// A failed exchange is recorded (TakeError) and makes the later ones no-ops,
// as the backend defers its errors: the engine checks after every loop.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/engine/layer_buffers.h"
#include "worker/engine/sequence_group.h"
#include "worker/model/model_config.h"

namespace sbp {

// Query and KV heads a rank attends for (see above).
int64_t UlyssesQueryHeads(const ModelConfig& config, int64_t group_size);
int64_t UlyssesKvHeads(const ModelConfig& config, int64_t group_size);

// Bytes of one of the two staging buffers for chunks of `chunk_rows` rows
// with activations of `activation_bytes`: a chunk's queries, or its K/V
// gradient rows (f32) for every rank, whichever is larger.
int64_t UlyssesStagingBytes(const ModelConfig& config, int64_t group_size, int64_t chunk_rows,
                            int64_t activation_bytes);

class UlyssesAttention {
 public:
  static absl::StatusOr<std::unique_ptr<UlyssesAttention>> Create(Backend& backend,
                                                                  const ModelConfig& config,
                                                                  SequenceGroup& group,
                                                                  int64_t local_rows,
                                                                  int64_t chunk_rows);

  int64_t local_rows() const { return local_rows_; }
  int64_t first_row() const { return first_row_; }

  // The gathered K/V (k and v [tokens, hkv, d]) and their gradients (f32).
  static absl::StatusOr<KvBuffers> AllocateGatheredKv(Backend& backend, const ModelConfig& config,
                                                      int64_t group_size, int64_t tokens,
                                                      const std::string& what);
  static absl::StatusOr<KvGrads> AllocateGatheredKvGrads(Backend& backend,
                                                         const ModelConfig& config,
                                                         int64_t group_size, int64_t tokens);

  // `local` holds local rows [s, s + m) of K/V.
  void ExchangeKv(const KvBuffers& local, int64_t s, KvBuffers& gathered);
  // a.attn <- attention of the chunk whose local queries are a.q (sequence
  // rows [begin, begin + m)); keeps the head-split q, output and lse in a.
  void Forward(ChunkActivations& a, const KvBuffers& gathered, int64_t begin, float scale,
               const Tensor* docs);
  // a.dq <- dL/dq of the chunk from a.d_attn; adds into gathered dK/dV.
  void Backward(ChunkActivations& a, const KvBuffers& gathered, KvGrads& gathered_grads,
                int64_t begin, float scale, const Tensor* docs);
  // local (f32 [m, Hkv, d]) <- this rank's finished dK/dV rows [s, s + m).
  void ReturnKvGrads(const KvGrads& gathered_grads, int64_t s, KvGrads& local);

  absl::Status TakeError();
  // Bytes this rank has sent through the group so far.
  int64_t sent_bytes() const { return sent_bytes_; }

 private:
  UlyssesAttention(Backend& backend, const ModelConfig& config, SequenceGroup& group,
                   int64_t local_rows);
  // A [blocks, per_block] view of staging buffer `which` (0 or 1).
  Tensor Staging(int which, int64_t per_block, DType dtype) const;
  // All-to-all of `send` (size() equal blocks) into `recv`.
  void Exchange(const Tensor& send, const Tensor& recv);

  Backend& backend_;
  const ModelConfig& config_;
  SequenceGroup& group_;
  const int group_size_;
  const int64_t local_rows_, first_row_;
  const int64_t query_heads_, kv_heads_;
  std::vector<int64_t> query_columns_, kv_columns_;  // per rank: first column
  Tensor staging_[2];
  absl::Status error_;
  int64_t sent_bytes_ = 0;
};

}  // namespace sbp
