#include "kernels/cpu/adamw.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/op_checks.h"

namespace sbp::cpu {
namespace {}  // namespace

void AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& params) {
  CheckHostLike(param, param, "param", "param");
  CheckHostLike(grad, param, "grad", "param");
  CheckHostLike(m, param, "m", "param");
  CheckHostLike(v, param, "v", "param");
  CHECK_GE(params.step, 1) << "AdamW step is 1-based";
  const double step = static_cast<double>(params.step);
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(params.beta1), step);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(params.beta2), step);
  const float decay = static_cast<float>(1.0 - static_cast<double>(params.lr) *
                                                   static_cast<double>(params.weight_decay));
  const float step_size = static_cast<float>(static_cast<double>(params.lr) / bias_correction1);
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float b1 = static_cast<float>(params.beta1), b2 = static_cast<float>(params.beta2);
  const float eps = static_cast<float>(params.eps);
  const float one_minus_b1 = static_cast<float>(1.0 - params.beta1);
  const float one_minus_b2 = static_cast<float>(1.0 - params.beta2);
  const float grad_scale = params.grad_scale;

  const int64_t n = param.numel();
  float* p = param.data<float>();
  const float* gs = grad.data<float>();
  float* ms = m.data<float>();
  float* vs = v.data<float>();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad_scale * gs[i];
    const float mi = b1 * ms[i] + one_minus_b1 * g;
    const float vi = b2 * vs[i] + one_minus_b2 * g * g;
    ms[i] = mi;
    vs[i] = vi;
    const float denom = std::sqrt(vi) / bias_correction2_sqrt + eps;
    p[i] = p[i] * decay - step_size * (mi / denom);
  }
}

}  // namespace sbp::cpu
