#include "kernels/profiling_backend.h"

#include <algorithm>
#include <chrono>
#include <type_traits>

#include "common/check.h"

namespace sbp {

const char* ProfilingBackend::OpName(Op op) {
  switch (op) {
    case Op::kCopy:
      return "copy";
    case Op::kEmbeddingForward:
      return "embedding_forward";
    case Op::kEmbeddingBackward:
      return "embedding_backward";
    case Op::kRmsNormForward:
      return "rms_norm_forward";
    case Op::kRmsNormBackward:
      return "rms_norm_backward";
    case Op::kRopeForward:
      return "rope_forward";
    case Op::kRopeBackward:
      return "rope_backward";
    case Op::kMatmulXWt:
      return "matmul_xwt";
    case Op::kMatmulDyW:
      return "matmul_dyw";
    case Op::kMatmulAccumDyTX:
      return "matmul_accum_dytx";
    case Op::kAddBias:
      return "add_bias";
    case Op::kBiasBackward:
      return "bias_backward";
    case Op::kAttentionForward:
      return "attention_forward";
    case Op::kAttentionBackward:
      return "attention_backward";
    case Op::kSwigluForward:
      return "swiglu_forward";
    case Op::kSwigluBackward:
      return "swiglu_backward";
    case Op::kCrossEntropyForwardBackward:
      return "cross_entropy_forward_backward";
    case Op::kLogProbsForward:
      return "log_probs_forward";
    case Op::kLogProbsBackward:
      return "log_probs_backward";
    case Op::kAdamW:
      return "adamw";
    case Op::kSumSquares:
      return "sum_squares";
    case Op::kAdd:
      return "add";
    case Op::kAxpy:
      return "axpy";
    case Op::kScale:
      return "scale";
    case Op::kFill:
      return "fill";
    case Op::kCast:
      return "cast";
    case Op::kNumOps:
      break;
  }
  CHECK(false) << "ProfilingBackend: no op " << static_cast<int>(op);
  return "";
}

std::vector<ProfilingBackend::OpStats> ProfilingBackend::Stats() const {
  std::vector<OpStats> out;
  for (int i = 0; i < static_cast<int>(Op::kNumOps); ++i) {
    if (stats_[i].calls == 0) continue;
    out.push_back({OpName(static_cast<Op>(i)), stats_[i].calls, stats_[i].seconds});
  }
  std::sort(out.begin(), out.end(), [](const OpStats& a, const OpStats& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.name < b.name;
  });
  return out;
}

double ProfilingBackend::total_seconds() const {
  double total = 0;
  for (const Counter& c : stats_) total += c.seconds;
  return total;
}

void ProfilingBackend::Reset() { stats_.fill(Counter()); }

template <typename Fn>
auto ProfilingBackend::Timed(Op op, Fn&& fn) {
  using Clock = std::chrono::steady_clock;
  Counter& counter = stats_[static_cast<int>(op)];
  inner_.Synchronize();
  const auto start = Clock::now();
  if constexpr (std::is_void_v<std::invoke_result_t<Fn>>) {
    fn();
    inner_.Synchronize();
    counter.seconds += std::chrono::duration<double>(Clock::now() - start).count();
    ++counter.calls;
  } else {
    auto result = fn();
    inner_.Synchronize();
    counter.seconds += std::chrono::duration<double>(Clock::now() - start).count();
    ++counter.calls;
    return result;
  }
}

void ProfilingBackend::Copy(const Tensor& src, Tensor& dst) {
  Timed(Op::kCopy, [&] { inner_.Copy(src, dst); });
}

void ProfilingBackend::EmbeddingForward(const Tensor& table, const Tensor& ids, Tensor& out) {
  Timed(Op::kEmbeddingForward, [&] { inner_.EmbeddingForward(table, ids, out); });
}

void ProfilingBackend::EmbeddingBackward(const Tensor& ids, const Tensor& dout, Tensor& dtable) {
  Timed(Op::kEmbeddingBackward, [&] { inner_.EmbeddingBackward(ids, dout, dtable); });
}

void ProfilingBackend::RmsNormForward(const Tensor& x, const Tensor& weight, float eps, Tensor& y,
                                      Tensor* rstd) {
  Timed(Op::kRmsNormForward, [&] { inner_.RmsNormForward(x, weight, eps, y, rstd); });
}

void ProfilingBackend::RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                       const Tensor& dy, Tensor& dx, Tensor& dweight) {
  Timed(Op::kRmsNormBackward, [&] { inner_.RmsNormBackward(x, weight, rstd, dy, dx, dweight); });
}

void ProfilingBackend::RopeForward(Tensor& x, int64_t position_offset, const RopeTable& rope,
                                   const Tensor* doc_offsets) {
  Timed(Op::kRopeForward, [&] { inner_.RopeForward(x, position_offset, rope, doc_offsets); });
}

void ProfilingBackend::RopeBackward(Tensor& dx, int64_t position_offset, const RopeTable& rope,
                                    const Tensor* doc_offsets) {
  Timed(Op::kRopeBackward, [&] { inner_.RopeBackward(dx, position_offset, rope, doc_offsets); });
}

void ProfilingBackend::MatmulXWt(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate) {
  Timed(Op::kMatmulXWt, [&] { inner_.MatmulXWt(x, w, y, accumulate); });
}

void ProfilingBackend::MatmulDyW(const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate) {
  Timed(Op::kMatmulDyW, [&] { inner_.MatmulDyW(dy, w, dx, accumulate); });
}

void ProfilingBackend::MatmulAccumDyTX(const Tensor& dy, const Tensor& x, Tensor& dw) {
  Timed(Op::kMatmulAccumDyTX, [&] { inner_.MatmulAccumDyTX(dy, x, dw); });
}

void ProfilingBackend::AddBias(Tensor& y, const Tensor& bias) {
  Timed(Op::kAddBias, [&] { inner_.AddBias(y, bias); });
}

void ProfilingBackend::BiasBackward(const Tensor& dy, Tensor& dbias) {
  Timed(Op::kBiasBackward, [&] { inner_.BiasBackward(dy, dbias); });
}

void ProfilingBackend::AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v,
                                        int64_t q_offset, float scale, Tensor& out, Tensor* lse,
                                        const Tensor* doc_offsets) {
  Timed(Op::kAttentionForward,
        [&] { inner_.AttentionForward(q, k, v, q_offset, scale, out, lse, doc_offsets); });
}

void ProfilingBackend::AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& out, const Tensor& dout, const Tensor& lse,
                                         int64_t q_offset, float scale, Tensor& dq, Tensor& dk,
                                         Tensor& dv, const Tensor* doc_offsets) {
  Timed(Op::kAttentionBackward, [&] {
    inner_.AttentionBackward(q, k, v, out, dout, lse, q_offset, scale, dq, dk, dv, doc_offsets);
  });
}

void ProfilingBackend::SwigluForward(const Tensor& gate, const Tensor& up, Tensor& out) {
  Timed(Op::kSwigluForward, [&] { inner_.SwigluForward(gate, up, out); });
}

void ProfilingBackend::SwigluBackward(const Tensor& gate, const Tensor& up, const Tensor& dout,
                                      Tensor& dgate, Tensor& dup) {
  Timed(Op::kSwigluBackward, [&] { inner_.SwigluBackward(gate, up, dout, dgate, dup); });
}

double ProfilingBackend::CrossEntropyForwardBackward(Tensor& logits, const Tensor& targets,
                                                     float scale) {
  return Timed(Op::kCrossEntropyForwardBackward,
               [&] { return inner_.CrossEntropyForwardBackward(logits, targets, scale); });
}

void ProfilingBackend::LogProbsForward(const Tensor& logits, const Tensor& targets,
                                       Tensor& logprobs, Tensor& lse) {
  Timed(Op::kLogProbsForward, [&] { inner_.LogProbsForward(logits, targets, logprobs, lse); });
}

void ProfilingBackend::LogProbsBackward(Tensor& logits, const Tensor& targets, const Tensor& lse,
                                        const Tensor& dlogprobs) {
  Timed(Op::kLogProbsBackward, [&] { inner_.LogProbsBackward(logits, targets, lse, dlogprobs); });
}

void ProfilingBackend::AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                             const AdamWParams& params) {
  Timed(Op::kAdamW, [&] { inner_.AdamW(param, grad, m, v, params); });
}

double ProfilingBackend::SumSquares(const Tensor& x) {
  return Timed(Op::kSumSquares, [&] { return inner_.SumSquares(x); });
}

void ProfilingBackend::Add(const Tensor& a, const Tensor& b, Tensor& out) {
  Timed(Op::kAdd, [&] { inner_.Add(a, b, out); });
}

void ProfilingBackend::Axpy(float alpha, const Tensor& x, Tensor& y) {
  Timed(Op::kAxpy, [&] { inner_.Axpy(alpha, x, y); });
}

void ProfilingBackend::Scale(Tensor& x, float s) {
  Timed(Op::kScale, [&] { inner_.Scale(x, s); });
}

void ProfilingBackend::Fill(Tensor& x, float value) {
  Timed(Op::kFill, [&] { inner_.Fill(x, value); });
}

void ProfilingBackend::Cast(const Tensor& src, Tensor& dst) {
  Timed(Op::kCast, [&] { inner_.Cast(src, dst); });
}

}  // namespace sbp
