// One decoder layer (pre-norm attention + SwiGLU MLP), split into the pieces
// StreamBP needs. With X the layer input and rows [s, s+n) a chunk:
//
//   xn = RMSNorm(X) w_in                       InputNorm
//   k = rope(knorm(xn Wk^T + bk)), v = xn Wv^T + bv     KvForward (rows of K/V)
//   q = rope(qnorm(xn Wq^T + bq))              ChunkForward (query rows):
//   a = attention(q, K[0:s+n], V[0:s+n])         keys up to the chunk end
//   h = X + a Wo^T;  hn = RMSNorm(h) w_post
//   Y = h + (silu(hn Wg^T) * (hn Wu^T)) Wd^T
//
// Backward is linear in dY, so a chunk's rows can be backpropagated on their
// own: ChunkBackward turns dY rows into the part of dX that does not pass
// through K/V and accumulates dK/dV for keys [0, s+n). Once every query chunk
// is done, KvBackward pushes the finished dK/dV rows back through rope,
// k_norm, the k/v projections and the input norm, adding to dX. Parameter
// gradients accumulate (+=) in both.
//
// LoRA: each targeted linear adds s (x A^T) B^T to its output (lora_linear.h);
// the k/v adapters run in KvForward/KvBackward, so K/V are still computed
// once per layer, and every chunk adds its low-rank terms into dA/dB (+=).
// Frozen base weights (undefined gradients) get no weight gradient.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "worker/engine/layer_buffers.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_config.h"

namespace sbp {

class UlyssesAttention;

class DecoderLayer {
 public:
  // `rope` is the model's rotary table (ModelConfig::rope_table), kept by reference.
  DecoderLayer(const ModelConfig& config, const RopeTable& rope, Backend& backend);

  // Packed documents of the sequence (kernels/documents.h, on the backend's
  // device; kept by pointer, null: one document): RoPE positions restart per
  // document and attention stays inside each one, in every piece below.
  void set_documents(const Tensor* doc_offsets) { docs_ = doc_offsets; }

  // Sequence parallelism (null: off): attention runs through `ulysses`, the
  // rows given below are this rank's (`begin` counts from the sequence's
  // start) and `kv`/`kv_grads` are the gathered K/V of this rank's heads.
  void set_sequence_parallel(UlyssesAttention* ulysses) { ulysses_ = ulysses; }

  // a.xn, a.x_rstd <- RMSNorm of x_rows.
  void InputNorm(const LayerWeights& w, const Tensor& x_rows, ChunkActivations& a);

  // Keys and values of rows [begin, begin + n) from a.xn; kv_rows are those rows of K/V.
  void KvForward(const LayerWeights& w, const ChunkActivations& a, int64_t begin,
                 KvBuffers& kv_rows);

  // Query rows [begin, begin + n) (after InputNorm); kv holds rows [0, begin + n).
  // Writes the layer output to y_rows when it is defined.
  void ChunkForward(const LayerWeights& w, const Tensor& x_rows, int64_t begin, const KvBuffers& kv,
                    ChunkActivations& a, Tensor y_rows);

  // Incremental decode (decoder.h): row r of x_rows is one new token of a
  // sequence at position positions[r] whose keys/values of rows [0,
  // positions[r]) are in *caches[r] ([capacity, Hkv, d] k and v). The row's
  // K/V are computed into new_kv (scratch of x_rows' rows, k_pre/k_rstd
  // too for qk_norm models), written to row positions[r] of its cache, and
  // its query attends over rows [0, positions[r]]. Writes y_rows.
  void DecodeForward(const LayerWeights& w, const Tensor& x_rows,
                     const std::vector<int64_t>& positions, const std::vector<KvBuffers*>& caches,
                     ChunkActivations& a, KvBuffers& new_kv, Tensor y_rows);

  // In: dy_rows = dL/dY of the chunk. Out: dy_rows = dL/dX of the chunk except
  // the path through K/V. Accumulates kv_grads.dk/dv for rows [0, begin + n).
  // Uses a's buffers as scratch (the chunk's forward must be in a).
  void ChunkBackward(const LayerWeights& w, const Tensor& x_rows, int64_t begin,
                     const KvBuffers& kv, ChunkActivations& a, KvGrads& kv_grads, Tensor& dy_rows,
                     LayerWeights& g);

  // Rows [begin, begin + n) of the finished dK/dV (kv_rows, kv_grad_rows are
  // those rows): dx_rows += their contribution through the input. a: scratch.
  void KvBackward(const LayerWeights& w, const Tensor& x_rows, int64_t begin,
                  const KvBuffers& kv_rows, KvGrads& kv_grad_rows, ChunkActivations& a,
                  Tensor& dx_rows, LayerWeights& g);

 private:
  // KvForward and ChunkForward without RoPE and attention: the k/v (and q)
  // projections with their biases, adapters and norms, and everything after
  // the attention (o_proj, residual, post norm, MLP).
  void ProjectKv(const LayerWeights& w, const ChunkActivations& a, KvBuffers& kv_rows);
  void ProjectQuery(const LayerWeights& w, ChunkActivations& a);
  void OutputAndMlp(const LayerWeights& w, const Tensor& x_rows, ChunkActivations& a,
                    Tensor y_rows);

  const ModelConfig& config_;
  const RopeTable& rope_;
  Backend& backend_;
  float eps_;
  float scale_;  // 1/sqrt(head_dim)
  const Tensor* docs_ = nullptr;
  UlyssesAttention* ulysses_ = nullptr;
};

}  // namespace sbp
