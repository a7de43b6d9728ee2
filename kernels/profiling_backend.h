// A decorator of the compute interface that measures where a step's time
// goes: it forwards every virtual of Backend to the backend it wraps and
// accumulates, per op, the number of calls and their wall time.
//
// Each op is bracketed by Synchronize() of the wrapped backend, before (so
// that earlier queued work is not charged to it) and after (so that the
// device's work is charged to the op that issued it), and timed with
// std::chrono::steady_clock. A profiled pass is therefore slower than an
// unprofiled one (every op waits for the device, and there is no overlap
// between ops): time a pass without it and profile another one for the
// shares. What the ops do not cover (host work between them, the
// synchronisations themselves) is the caller's step time less
// total_seconds().
//
// Results are bit for bit the wrapped backend's: nothing but timing is added.
// Not thread-safe (neither are the backends it wraps).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace sbp {

class ProfilingBackend final : public Backend {
 public:
  // The profiled ops, one per timed virtual.
  enum class Op : int {
    kCopy,
    kEmbeddingForward,
    kEmbeddingBackward,
    kRmsNormForward,
    kRmsNormBackward,
    kRopeForward,
    kRopeBackward,
    kMatmulXWt,
    kMatmulDyW,
    kMatmulAccumDyTX,
    kAddBias,
    kBiasBackward,
    kAttentionForward,
    kAttentionBackward,
    kSwigluForward,
    kSwigluBackward,
    kCrossEntropyForwardBackward,
    kLogProbsForward,
    kLogProbsBackward,
    kAdamW,
    kSumSquares,
    kAdd,
    kAxpy,
    kScale,
    kFill,
    kCast,
    kNumOps,
  };
  // snake_case, e.g. "attention_backward", "matmul_xwt".
  static const char* OpName(Op op);

  struct OpStats {
    std::string name;
    int64_t calls = 0;
    double seconds = 0;
  };

  // `inner` must outlive this object.
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}

  Backend& inner() const { return inner_; }
  // The ops called at least once, most time first (ties by name).
  std::vector<OpStats> Stats() const;
  int64_t calls(Op op) const { return stats_[static_cast<int>(op)].calls; }
  double seconds(Op op) const { return stats_[static_cast<int>(op)].seconds; }
  double total_seconds() const;  // over every op
  void Reset();

  // ---- forwarded untimed ----
  Device device() const override { return inner_.device(); }
  Allocator& allocator() override { return inner_.allocator(); }
  DType activation_dtype() const override { return inner_.activation_dtype(); }
  void Synchronize() override { inner_.Synchronize(); }
  void* native_stream() const override { return inner_.native_stream(); }
  absl::Status TakeDeferredError() override { return inner_.TakeDeferredError(); }
  absl::Status CheckAttentionShape(int64_t head_dim, int64_t query_heads) const override {
    return inner_.CheckAttentionShape(head_dim, query_heads);
  }

  // ---- timed ----
  void Copy(const Tensor& src, Tensor& dst) override;

  void EmbeddingForward(const Tensor& table, const Tensor& ids, Tensor& out) override;
  void EmbeddingBackward(const Tensor& ids, const Tensor& dout, Tensor& dtable) override;

  void RmsNormForward(const Tensor& x, const Tensor& weight, float eps, Tensor& y,
                      Tensor* rstd) override;
  void RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor& dx, Tensor& dweight) override;

  void RopeForward(Tensor& x, int64_t position_offset, const RopeTable& rope,
                   const Tensor* doc_offsets = nullptr) override;
  void RopeBackward(Tensor& dx, int64_t position_offset, const RopeTable& rope,
                    const Tensor* doc_offsets = nullptr) override;

  void MatmulXWt(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate) override;
  void MatmulDyW(const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate) override;
  void MatmulAccumDyTX(const Tensor& dy, const Tensor& x, Tensor& dw) override;
  void AddBias(Tensor& y, const Tensor& bias) override;
  void BiasBackward(const Tensor& dy, Tensor& dbias) override;

  void AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_offset,
                        float scale, Tensor& out, Tensor* lse,
                        const Tensor* doc_offsets = nullptr) override;
  void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& dout, const Tensor& lse, int64_t q_offset, float scale,
                         Tensor& dq, Tensor& dk, Tensor& dv,
                         const Tensor* doc_offsets = nullptr) override;

  void SwigluForward(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void SwigluBackward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate,
                      Tensor& dup) override;

  double CrossEntropyForwardBackward(Tensor& logits, const Tensor& targets, float scale) override;
  void LogProbsForward(const Tensor& logits, const Tensor& targets, Tensor& logprobs,
                       Tensor& lse) override;
  void LogProbsBackward(Tensor& logits, const Tensor& targets, const Tensor& lse,
                        const Tensor& dlogprobs) override;

  void AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
             const AdamWParams& params) override;
  double SumSquares(const Tensor& x) override;

  void Add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void Axpy(float alpha, const Tensor& x, Tensor& y) override;
  void Scale(Tensor& x, float s) override;
  void Fill(Tensor& x, float value) override;
  void Cast(const Tensor& src, Tensor& dst) override;

 private:
  struct Counter {
    int64_t calls = 0;
    double seconds = 0;
  };
  // Synchronizes the wrapped backend, runs `fn` on it, synchronizes again,
  // and charges the time to `op`.
  template <typename Fn>
  auto Timed(Op op, Fn&& fn);

  Backend& inner_;
  std::array<Counter, static_cast<int>(Op::kNumOps)> stats_{};
};

}  // namespace sbp
