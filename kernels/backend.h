// The compute interface of the engine: one virtual per op, forward and
// backward side by side. The CPU backend (fp32, OpenBLAS + OpenMP) is the
// reference; the CUDA backend implements the same contract.
//
// Conventions for every op:
//   * tensors are contiguous and row-major; "rows" means all leading dims
//     flattened (a [T, H, d] tensor normalised over d has T*H rows);
//   * parameter gradients ACCUMULATE (+=), activation gradients are WRITTEN (=);
//   * shapes are checked with CHECK (a wrong shape is a bug in our code);
//   * an output may alias an input only where the op says so.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "kernels/allocator.h"
#include "kernels/rope_table.h"
#include "kernels/tensor.h"
#include "kernels/transfer_queue.h"

namespace sbp {

// Hyper-parameters in double, as PyTorch holds them (1 - beta2 is formed in
// double before it meets fp32 tensors).
struct AdamWParams {
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;         // 1-based, for bias correction
  float grad_scale = 1.0f;  // multiplies the gradient first (clipping, averaging)
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual Allocator& allocator() = 0;
  // Storage dtype of activations: f32 on the CPU; bf16 (or f32) on CUDA.
  // Per-row statistics (rstd, lse) and parameter gradients stay f32.
  virtual DType activation_dtype() const { return DType::kF32; }

  // ---- transfers (the defaults suit backends that compute in host memory) ----
  // dst = src, equal shapes and dtypes, where each side is host memory or this
  // backend's device. Returns once src may be reused and, when dst is on the
  // host, once dst holds the data.
  virtual void Copy(const Tensor& src, Tensor& dst);
  // Column blocks between `rows` [n, C] and `blocks` [P, S] (both
  // contiguous, one dtype, this backend's memory), the staging of sequence
  // parallelism's all-to-all: block j's region is the n x w matrix starting
  // at element j * S + offset_in_block of `blocks`, and holds columns
  // [column_offsets[j], column_offsets[j] + w) of every row of `rows`.
  // to_blocks: regions = columns; else columns = regions (a later block
  // overwrites an earlier one where the column ranges meet).
  virtual void CopyColumnBlocks(const Tensor& rows, const Tensor& blocks,
                                const std::vector<int64_t>& column_offsets, int64_t width,
                                int64_t offset_in_block, bool to_blocks);
  // Waits for every op issued so far; CHECK-fails on an asynchronous device
  // error.
  virtual void Synchronize() {}
  // The native queue the ops are issued on (a cudaStream_t on CUDA), for
  // work that must be ordered after them (collectives); null on the CPU.
  virtual void* native_stream() const { return nullptr; }

  // The first failure an op could not return, cleared by the call. An op
  // whose scratch memory cannot be had (the device is full) records
  // RESOURCE_EXHAUSTED naming it and does nothing, and so does every op after
  // it until this is called: callers check it where they can abandon the
  // work (the engine after each layer and at the end of a pass), before they
  // read any result. Always OK on the CPU, whose ops take no scratch from
  // the allocator.
  virtual absl::Status TakeDeferredError() { return absl::OkStatus(); }

  // ---- memory tiers (worker/engine/offload) --------------------------------
  // Host memory that buffers moved off the device live in: pinned on CUDA (so
  // that copies run asynchronously at full speed), plain on the CPU. Tracked
  // apart from allocator(), whose budget and peak are the device's.
  virtual Allocator& host_allocator() { return host_allocator_; }
  // A queue of copies that run beside this backend's ops (transfer_queue.h).
  virtual std::unique_ptr<TransferQueue> NewTransferQueue() { return NewHostTransferQueue(); }

  // Whether this backend's kernels take attention (and RoPE) of this shape;
  // a status naming the limit when not. Checked before a model runs, so that
  // a model the device cannot run is an error, not an abort in its first op.
  virtual absl::Status CheckAttentionShape(int64_t head_dim, int64_t query_heads) const {
    return absl::OkStatus();
  }

  // ---- embedding -------------------------------------------------------
  // out[t, :] = table[ids[t], :].  table [V, H] f32, ids [T] i32, out [T, H].
  virtual void EmbeddingForward(const Tensor& table, const Tensor& ids, Tensor& out) = 0;
  // dtable[ids[t], :] += dout[t, :]  (scatter-add; repeated ids sum).
  virtual void EmbeddingBackward(const Tensor& ids, const Tensor& dout, Tensor& dtable) = 0;

  // ---- RMSNorm over the last dim D = weight.numel() -----------------------
  // rstd = 1/sqrt(mean(x^2) + eps) per row; y = x * rstd * weight.
  // rstd [rows] is saved for backward when non-null. y may alias x.
  virtual void RmsNormForward(const Tensor& x, const Tensor& weight, float eps, Tensor& y,
                              Tensor* rstd) = 0;
  // With n = x*rstd:  dx = rstd * (w*dy - n * mean(w*dy*n)),  dweight += sum_rows dy*n.
  // dx may alias dy.
  virtual void RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                               const Tensor& dy, Tensor& dx, Tensor& dweight) = 0;

  // ---- rotary position embedding (Hugging Face rotate_half) ----------------
  // x [T, H, d] in place; row t has position pos = position_offset + t, or,
  // with doc_offsets (packed documents, kernels/documents.h, on this backend's
  // device), pos = p - DocumentStart(p) for p = position_offset + t;
  // angle = pos * rope.inv_freq_i for i < d/2 (d = rope.head_dim()),
  // c = m cos(angle), s = m sin(angle) with m = rope.attention_scaling;
  // x1 = x[..., :d/2], x2 = x[..., d/2:]: (x1, x2) <- (x1 c - x2 s, x2 c + x1 s).
  virtual void RopeForward(Tensor& x, int64_t position_offset, const RopeTable& rope,
                           const Tensor* doc_offsets = nullptr) = 0;
  // The transposed map (c, -s), in place on the gradient.
  virtual void RopeBackward(Tensor& dx, int64_t position_offset, const RopeTable& rope,
                            const Tensor* doc_offsets = nullptr) = 0;

  // ---- matmul: the three layouts of a linear layer y = x W^T --------------
  // y [N, M] = x [N, K] . w [M, K]^T   (+= when accumulate)
  virtual void MatmulXWt(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate) = 0;
  // dx [N, K] = dy [N, M] . w [M, K]   (+= when accumulate)
  virtual void MatmulDyW(const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate) = 0;
  // dw [M, K] += dy [N, M]^T . x [N, K]
  virtual void MatmulAccumDyTX(const Tensor& dy, const Tensor& x, Tensor& dw) = 0;
  // y [N, M] += bias [M];  dbias [M] += sum over rows of dy.
  virtual void AddBias(Tensor& y, const Tensor& bias) = 0;
  virtual void BiasBackward(const Tensor& dy, Tensor& dbias) = 0;

  // ---- causal grouped-query attention with a query offset ------------------
  // q [Tq, Hq, d] holds sequence rows [q_offset, q_offset + Tq); k, v
  // [Tk, Hkv, d] hold rows [0, Tk) with Tk >= q_offset + Tq. Query i sees keys
  // j <= q_offset + i (bottom-right aligned). Query head h reads KV head
  // h / (Hq / Hkv). s_ij = scale * q_i . k_j;  out_i = sum_j softmax_j(s_i) v_j;
  // lse [Tq, Hq] = logsumexp_j s_ij is saved for backward when non-null.
  // Tiled: memory O(tile^2) per thread, never a Tq x Tk matrix.
  // Packed documents: with doc_offsets (i32 [n + 1] on this backend's device,
  // kernels/documents.h), query i sees only keys j with
  // DocumentStart(q_offset + i) <= j <= q_offset + i (block-diagonal causal).
  virtual void AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_offset,
                                float scale, Tensor& out, Tensor* lse,
                                const Tensor* doc_offsets = nullptr) = 0;
  // P = exp(s - lse), D_i = dout_i . out_i, dS = P * (dout . v^T - D):
  // dq = scale * dS k (written), dk += scale * dS^T q, dv += P^T dout
  // (accumulated, so chunks of queries sum their contributions).
  virtual void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const Tensor& dout, const Tensor& lse,
                                 int64_t q_offset, float scale, Tensor& dq, Tensor& dk, Tensor& dv,
                                 const Tensor* doc_offsets = nullptr) = 0;

  // ---- SwiGLU --------------------------------------------------------------
  // out = silu(gate) * up, all [N, F]; silu(g) = g * sigmoid(g).
  virtual void SwigluForward(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  // dgate = dout * up * sigmoid(g) * (1 + g (1 - sigmoid(g))), dup = dout * silu(g).
  // dgate may alias gate and dup may alias up (written element by element).
  virtual void SwigluBackward(const Tensor& gate, const Tensor& up, const Tensor& dout,
                              Tensor& dgate, Tensor& dup) = 0;

  // ---- softmax cross-entropy over a chunk of logits -----------------------
  // logits [N, V] f32, targets [N] i32 with -100 = ignored.
  // Fused: returns sum over valid rows of -log softmax(logits_r)[t_r] and
  // overwrites logits with scale * (softmax - onehot(t)); ignored rows -> 0.
  virtual double CrossEntropyForwardBackward(Tensor& logits, const Tensor& targets,
                                             float scale) = 0;
  // Log-probabilities of the targets: logprobs [N] = logits[r, t_r] - lse[r]
  // (0 on ignored rows), lse [N]. For objectives that weight tokens (DPO, GRPO).
  virtual void LogProbsForward(const Tensor& logits, const Tensor& targets, Tensor& logprobs,
                               Tensor& lse) = 0;
  // In place: logits <- dlogprobs[r] * (onehot(t_r) - softmax(logits_r)), the
  // gradient of sum_r dlogprobs[r] * logprobs[r]; ignored rows -> 0.
  virtual void LogProbsBackward(Tensor& logits, const Tensor& targets, const Tensor& lse,
                                const Tensor& dlogprobs) = 0;

  // ---- optimizer and reductions ------------------------------------------
  // Decoupled AdamW on fp32 master weights: g = grad_scale * grad;
  // m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr * (wd p + m_hat/(sqrt(v_hat)+eps)).
  virtual void AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                     const AdamWParams& params) = 0;
  // sum of x^2 in double precision (gradient-norm clipping).
  virtual double SumSquares(const Tensor& x) = 0;

  // ---- elementwise -----------------------------------------------------------
  // out = a + b (out may alias a or b).
  virtual void Add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // y += alpha * x.
  virtual void Axpy(float alpha, const Tensor& x, Tensor& y) = 0;
  // x *= s.
  virtual void Scale(Tensor& x, float s) = 0;
  // x = value (f32, bf16 or i32 storage; value converted).
  virtual void Fill(Tensor& x, float value) = 0;
  // dst = src with dtype conversion (f32 <-> bf16, or a plain copy).
  virtual void Cast(const Tensor& src, Tensor& dst) = 0;

 private:
  CpuAllocator host_allocator_;
};

// CHECKs the shapes of Backend::CopyColumnBlocks (every implementation).
void CheckColumnBlocks(const Tensor& rows, const Tensor& blocks,
                       const std::vector<int64_t>& column_offsets, int64_t width,
                       int64_t offset_in_block);

}  // namespace sbp
