// Decoupled AdamW on fp32 master weights (CUDA), element by element as in
// kernels/cpu/adamw.h (the scalars are formed in double on the host):
//   g = grad_scale * grad; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//   p = p * (1 - lr wd) - step_size * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// param, m, v f32; grad f32 or bf16.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace sbp::cuda {
namespace {

__global__ void AdamWKernel(float* p, In grad, float* m, float* v, int64_t n, AdamWScalars s) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const float g = s.grad_scale * Load(grad, i);
    const float mi = s.b1 * m[i] + s.one_minus_b1 * g;
    const float vi = s.b2 * v[i] + s.one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / s.bias_correction2_sqrt + s.eps;
    p[i] = p[i] * s.decay - s.step_size * (mi / denom);
  }
}

}  // namespace

void LaunchAdamW(cudaStream_t stream, float* param, In grad, float* m, float* v, int64_t n,
                 const AdamWScalars& scalars) {
  if (n == 0) return;
  AdamWKernel<<<GridFor(n), kThreads, 0, stream>>>(param, grad, m, v, n, scalars);
  CheckLaunch("AdamWKernel", stream);
}

}  // namespace sbp::cuda
