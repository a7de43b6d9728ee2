#include "kernels/cpu/adamw.h"

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/op_checks.h"

namespace sbp::cpu {
namespace {

// One call's coefficients (see adamw.h).
struct Coefficients {
  float decay, step_size, bias_correction2_sqrt, b1, b2, eps, one_minus_b1, one_minus_b2,
      grad_scale;
};

Coefficients CoefficientsOf(const AdamWParams& params) {
  CHECK_GE(params.step, 1) << "AdamW step is 1-based";
  const double step = static_cast<double>(params.step);
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(params.beta1), step);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(params.beta2), step);
  Coefficients k;
  k.decay = static_cast<float>(1.0 - static_cast<double>(params.lr) *
                                         static_cast<double>(params.weight_decay));
  k.step_size = static_cast<float>(static_cast<double>(params.lr) / bias_correction1);
  k.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  k.b1 = static_cast<float>(params.beta1);
  k.b2 = static_cast<float>(params.beta2);
  k.eps = static_cast<float>(params.eps);
  k.one_minus_b1 = static_cast<float>(1.0 - params.beta1);
  k.one_minus_b2 = static_cast<float>(1.0 - params.beta2);
  k.grad_scale = params.grad_scale;
  return k;
}

// One element's update: every caller computes it with this code, so the
// dense and the row-set updates round alike.
__attribute__((always_inline)) inline void UpdateElement(const Coefficients& k, float grad,
                                                         float& p, float& m, float& v) {
  const float g = k.grad_scale * grad;
  const float mi = k.b1 * m + k.one_minus_b1 * g;
  const float vi = k.b2 * v + k.one_minus_b2 * g * g;
  m = mi;
  v = vi;
  const float denom = std::sqrt(vi) / k.bias_correction2_sqrt + k.eps;
  p = p * k.decay - k.step_size * (mi / denom);
}

}  // namespace

void AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& params) {
  CheckHostLike(param, param, "param", "param");
  CheckHostLike(grad, param, "grad", "param");
  CheckHostLike(m, param, "m", "param");
  CheckHostLike(v, param, "v", "param");
  const Coefficients k = CoefficientsOf(params);
  const int64_t n = param.numel();
  float* p = param.data<float>();
  const float* gs = grad.data<float>();
  float* ms = m.data<float>();
  float* vs = v.data<float>();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) UpdateElement(k, gs[i], p[i], ms[i], vs[i]);
}

void AdamWRows(Tensor& param, const std::vector<std::pair<int32_t, int32_t>>& nonzero,
               const float* values, Tensor& m, Tensor& v, const AdamWParams& params) {
  CheckHostLike(param, param, "param", "param");
  CheckHostLike(m, param, "m", "param");
  CheckHostLike(v, param, "v", "param");
  CHECK_EQ(param.rank(), 2) << "AdamWRows: param must be a [rows, cols] table, got "
                            << param.DebugString();
  const Coefficients k = CoefficientsOf(params);
  const int64_t rows = param.dim(0), cols = param.dim(1);
  std::vector<int32_t> slot(static_cast<size_t>(rows), -1);
  for (const auto& [row, s] : nonzero) {
    CHECK(row >= 0 && row < rows) << "AdamWRows: row " << row << " outside [0, " << rows << ")";
    slot[row] = s;
  }
  float* p = param.data<float>();
  float* ms = m.data<float>();
  float* vs = v.data<float>();
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinElements)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * cols;
    if (slot[r] < 0) {
      for (int64_t c = 0; c < cols; ++c)
        UpdateElement(k, 0.0f, p[base + c], ms[base + c], vs[base + c]);
      continue;
    }
    const float* g = values + static_cast<int64_t>(slot[r]) * cols;
    for (int64_t c = 0; c < cols; ++c)
      UpdateElement(k, g[c], p[base + c], ms[base + c], vs[base + c]);
  }
}

}  // namespace sbp::cpu
