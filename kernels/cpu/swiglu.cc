#include "kernels/cpu/swiglu.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/op_checks.h"

namespace sbp::cpu {
namespace {

inline float Sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

}  // namespace

void SwigluForward(const Tensor& gate, const Tensor& up, Tensor& out) {
  CheckHostLike(gate, gate, "gate", "gate");
  CheckHostLike(up, gate, "up", "gate");
  CheckHostLike(out, gate, "out", "gate");
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
  CheckHostLike(gate, gate, "gate", "gate");
  CheckHostLike(up, gate, "up", "gate");
  CheckHostLike(dout, gate, "dout", "gate");
  CheckHostLike(dgate, gate, "dgate", "gate");
  CheckHostLike(dup, gate, "dup", "gate");
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
