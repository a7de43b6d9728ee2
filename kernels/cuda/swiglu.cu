// SwiGLU gating (CUDA), the math of kernels/cpu/swiglu.h:
//   forward:  out = silu(g) * u,  silu(g) = g * sigmoid(g)
//   backward: dgate = dout * u * sigmoid(g) * (1 + g (1 - sigmoid(g))),
//             dup   = dout * silu(g)
// Each element is read before it is written by the same thread, so dgate may
// alias gate, dup may alias up and out may alias either input.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace sbp::cuda {
namespace {

__device__ __forceinline__ float Sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void SwigluForwardKernel(In gate, In up, Out out, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const float g = Load(gate, i);
    Store(out, i, g * Sigmoid(g) * Load(up, i));
  }
}

__global__ void SwigluBackwardKernel(In gate, In up, In dout, Out dgate, Out dup, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const float g = Load(gate, i), u = Load(up, i), dy = Load(dout, i);
    const float s = Sigmoid(g);
    Store(dgate, i, dy * u * s * (1.0f + g * (1.0f - s)));
    Store(dup, i, dy * g * s);
  }
}

}  // namespace

void LaunchSwigluForward(cudaStream_t stream, In gate, In up, Out out, int64_t n) {
  if (n == 0) return;
  SwigluForwardKernel<<<GridFor(n), kThreads, 0, stream>>>(gate, up, out, n);
  CheckLaunch("SwigluForwardKernel", stream);
}

void LaunchSwigluBackward(cudaStream_t stream, In gate, In up, In dout, Out dgate, Out dup,
                          int64_t n) {
  if (n == 0) return;
  SwigluBackwardKernel<<<GridFor(n), kThreads, 0, stream>>>(gate, up, dout, dgate, dup, n);
  CheckLaunch("SwigluBackwardKernel", stream);
}

}  // namespace sbp::cuda
