#include "kernels/cpu/swiglu.h"

#include <cmath>
#include <cstdint>

namespace sbp::cpu {
namespace {

constexpr int64_t kParallelMinElements = 1 << 15;

void CheckLike(const Tensor& t, const Tensor& like, const char* name) {
  CHECK(t.defined()) << name << " is undefined";
  CHECK(t.device().is_cpu()) << name << " must be on the cpu, got " << t.DebugString();
  CHECK(t.dtype() == DType::kF32) << name << " must be f32, got " << t.DebugString();
  CHECK(t.is_contiguous()) << name << " must be contiguous, got " << t.DebugString();
  CHECK(t.shape() == like.shape())
      << name << " " << t.DebugString() << " must match gate " << like.DebugString();
}

inline float Sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

}  // namespace

void SwigluForward(const Tensor& gate, const Tensor& up, Tensor& out) {
  CheckLike(gate, gate, "gate");
  CheckLike(up, gate, "up");
  CheckLike(out, gate, "out");
  const int64_t n = gate.numel();
  const float* g = gate.data<float>();
  const float* u = up.data<float>();
  float* o = out.data<float>();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    o[i] = gi * Sigmoid(gi) * u[i];
  }
}

void SwigluBackward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate,
                    Tensor& dup) {
  CheckLike(gate, gate, "gate");
  CheckLike(up, gate, "up");
  CheckLike(dout, gate, "dout");
  CheckLike(dgate, gate, "dgate");
  CheckLike(dup, gate, "dup");
  const int64_t n = gate.numel();
  const float* g = gate.data<float>();
  const float* u = up.data<float>();
  const float* dy = dout.data<float>();
  float* dg = dgate.data<float>();
  float* du = dup.data<float>();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    // All reads before the writes: dgate may alias gate, dup may alias up.
    const float gi = g[i], ui = u[i], dyi = dy[i];
    const float s = Sigmoid(gi);
    dg[i] = dyi * ui * s * (1.0f + gi * (1.0f - s));
    du[i] = dyi * gi * s;
  }
}

}  // namespace sbp::cpu
