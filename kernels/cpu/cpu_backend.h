// CPU backend: fp32 reference and fast path (OpenBLAS GEMMs, OpenMP over rows
// and heads). Each op's methods are defined in the file named after the op
// (cpu/attention.cc, cpu/rms_norm.cc, ...), forward and backward together.
#pragma once

#include "kernels/backend.h"

namespace sbp {

class CpuBackend final : public Backend {
 public:
  // Uses `allocator` for scratch and reports it; the allocator must outlive
  // the backend.
  explicit CpuBackend(Allocator& allocator) : allocator_(allocator) {}

  Device device() const override { return Device::Cpu(); }
  Allocator& allocator() override { return allocator_; }
  DType activation_dtype() const override { return DType::kF32; }
  void Copy(const Tensor& src, Tensor& dst) override;
  void Synchronize() override {}  // every op has finished when it returns

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
  Allocator& allocator_;
};

}  // namespace sbp
