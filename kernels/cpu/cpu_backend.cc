// CpuBackend: each virtual forwards to the op's free function in sbp::cpu
// (one file per op under kernels/cpu/).
#include "kernels/cpu/cpu_backend.h"

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"

namespace sbp {

void CpuBackend::EmbeddingForward(const Tensor& table, const Tensor& ids, Tensor& out) {
  cpu::EmbeddingForward(table, ids, out);
}
void CpuBackend::EmbeddingBackward(const Tensor& ids, const Tensor& dout, Tensor& dtable) {
  cpu::EmbeddingBackward(ids, dout, dtable);
}
void CpuBackend::RmsNormForward(const Tensor& x, const Tensor& weight, float eps, Tensor& y,
                                Tensor* rstd) {
  cpu::RmsNormForward(x, weight, eps, y, rstd);
}
void CpuBackend::RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                 const Tensor& dy, Tensor& dx, Tensor& dweight) {
  cpu::RmsNormBackward(x, weight, rstd, dy, dx, dweight);
}
void CpuBackend::RopeForward(Tensor& x, int64_t position_offset, const RopeTable& rope,
                             const Tensor* doc_offsets) {
  cpu::RopeForward(x, position_offset, rope, doc_offsets);
}
void CpuBackend::RopeBackward(Tensor& dx, int64_t position_offset, const RopeTable& rope,
                              const Tensor* doc_offsets) {
  cpu::RopeBackward(dx, position_offset, rope, doc_offsets);
}
void CpuBackend::MatmulXWt(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate) {
  cpu::MatmulXWt(x, w, y, accumulate);
}
void CpuBackend::MatmulDyW(const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate) {
  cpu::MatmulDyW(dy, w, dx, accumulate);
}
void CpuBackend::MatmulAccumDyTX(const Tensor& dy, const Tensor& x, Tensor& dw) {
  cpu::MatmulAccumDyTX(dy, x, dw);
}
void CpuBackend::AddBias(Tensor& y, const Tensor& bias) { cpu::AddBias(y, bias); }
void CpuBackend::BiasBackward(const Tensor& dy, Tensor& dbias) { cpu::BiasBackward(dy, dbias); }
void CpuBackend::AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  int64_t q_offset, float scale, Tensor& out, Tensor* lse,
                                  const Tensor* doc_offsets) {
  cpu::AttentionForward(q, k, v, q_offset, scale, out, lse, doc_offsets);
}
void CpuBackend::AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& dout, const Tensor& lse,
                                   int64_t q_offset, float scale, Tensor& dq, Tensor& dk,
                                   Tensor& dv, const Tensor* doc_offsets) {
  cpu::AttentionBackward(q, k, v, out, dout, lse, q_offset, scale, dq, dk, dv, doc_offsets);
}
void CpuBackend::SwigluForward(const Tensor& gate, const Tensor& up, Tensor& out) {
  cpu::SwigluForward(gate, up, out);
}
void CpuBackend::SwigluBackward(const Tensor& gate, const Tensor& up, const Tensor& dout,
                                Tensor& dgate, Tensor& dup) {
  cpu::SwigluBackward(gate, up, dout, dgate, dup);
}
double CpuBackend::CrossEntropyForwardBackward(Tensor& logits, const Tensor& targets, float scale) {
  return cpu::CrossEntropyForwardBackward(logits, targets, scale);
}
void CpuBackend::LogProbsForward(const Tensor& logits, const Tensor& targets, Tensor& logprobs,
                                 Tensor& lse) {
  cpu::LogProbsForward(logits, targets, logprobs, lse);
}
void CpuBackend::LogProbsBackward(Tensor& logits, const Tensor& targets, const Tensor& lse,
                                  const Tensor& dlogprobs) {
  cpu::LogProbsBackward(logits, targets, lse, dlogprobs);
}
void CpuBackend::AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                       const AdamWParams& params) {
  cpu::AdamW(param, grad, m, v, params);
}
double CpuBackend::SumSquares(const Tensor& x) { return cpu::SumSquares(x); }
void CpuBackend::Add(const Tensor& a, const Tensor& b, Tensor& out) { cpu::Add(a, b, out); }
void CpuBackend::Axpy(float alpha, const Tensor& x, Tensor& y) { cpu::Axpy(alpha, x, y); }
void CpuBackend::Scale(Tensor& x, float s) { cpu::Scale(x, s); }
void CpuBackend::Fill(Tensor& x, float value) { cpu::Fill(x, value); }
void CpuBackend::Cast(const Tensor& src, Tensor& dst) { cpu::Cast(src, dst); }
void CpuBackend::Copy(const Tensor& src, Tensor& dst) { cpu::Copy(src, dst); }

}  // namespace sbp
