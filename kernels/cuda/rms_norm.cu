// RMSNorm over the last dim D (CUDA), the math of kernels/cpu/rms_norm.h:
//   forward:  rstd_r = 1 / sqrt(mean_j x_rj^2 + eps),  y_rj = x_rj * rstd_r * w_j
//   backward: n = x * rstd,  dx_r = rstd_r * (w*dy_r - n_r * mean_j(w*dy_r*n_r)),
//             dweight_j += sum_r dy_rj * n_rj
// One warp per row, fp32 sums. dweight: per-group column partials
// [groups, D] then a sum over groups in order (deterministic). The backward
// runs the dweight pass before the dx pass because dx may alias dy; within
// the dx pass each element is read before it is written by the same thread,
// so y may alias x and dx may alias dy.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace sbp::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row

__global__ void RmsNormForwardKernel(In x, In w, int64_t rows, int64_t d, float eps, Out y,
                                     float* rstd) {
  const int lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= rows) return;
  const int64_t base = r * d;
  float sum = 0.0f;
  for (int64_t j = lane; j < d; j += 32) {
    const float v = Load(x, base + j);
    sum += v * v;
  }
  sum = WarpSum(sum);
  const float s = 1.0f / sqrtf(sum / static_cast<float>(d) + eps);
  for (int64_t j = lane; j < d; j += 32) Store(y, base + j, (Load(x, base + j) * s) * Load(w, j));
  if (rstd != nullptr && lane == 0) rstd[r] = s;
}

// partials[g, c] = sum over rows of group g of dy[r, c] * x[r, c] * rstd[r].
__global__ void RmsNormWeightPartialsKernel(In x, const float* rstd, In dy, int64_t rows, int64_t d,
                                            int64_t rows_per_group, float* partials) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t g = blockIdx.y;
  if (c >= d) return;
  const int64_t r0 = g * rows_per_group;
  const int64_t r1 = min(rows, r0 + rows_per_group);
  double acc = 0.0;  // in double like the CPU: a group can hold 10^4+ rows (QK-norm: T * heads)
  for (int64_t r = r0; r < r1; ++r) acc += Load(dy, r * d + c) * (Load(x, r * d + c) * rstd[r]);
  partials[g * d + c] = static_cast<float>(acc);
}

__global__ void RmsNormBackwardKernel(In x, In w, const float* rstd, In dy, int64_t rows, int64_t d,
                                      Out dx) {
  const int lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= rows) return;
  const int64_t base = r * d;
  const float s = rstd[r];
  float dot = 0.0f;  // sum_j w*dy*x
  for (int64_t j = lane; j < d; j += 32) {
    dot += (Load(w, j) * Load(dy, base + j)) * Load(x, base + j);
  }
  dot = WarpSum(dot);
  const float mean = dot * s / static_cast<float>(d);
  for (int64_t j = lane; j < d; j += 32) {
    const float xj = Load(x, base + j);
    Store(dx, base + j, s * (Load(w, j) * Load(dy, base + j) - (xj * s) * mean));
  }
}

}  // namespace

void LaunchRmsNormForward(cudaStream_t stream, In x, In w, int64_t rows, int64_t d, float eps,
                          Out y, float* rstd) {
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  RmsNormForwardKernel<<<blocks, kRowsPerBlock * 32, 0, stream>>>(x, w, rows, d, eps, y, rstd);
  CheckLaunch("RmsNormForwardKernel", stream);
}

void LaunchRmsNormBackward(cudaStream_t stream, In x, In w, const float* rstd, In dy, int64_t rows,
                           int64_t d, int groups, float* partials, Out dx, Out dweight) {
  if (rows == 0) return;
  const int64_t rows_per_group = (rows + groups - 1) / groups;
  const dim3 grid(static_cast<unsigned>((d + kThreads - 1) / kThreads),
                  static_cast<unsigned>(groups));
  RmsNormWeightPartialsKernel<<<grid, kThreads, 0, stream>>>(x, rstd, dy, rows, d, rows_per_group,
                                                             partials);
  CheckLaunch("RmsNormWeightPartialsKernel", stream);
  LaunchAddPartials(stream, partials, groups, d, dweight);
  const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  RmsNormBackwardKernel<<<blocks, kRowsPerBlock * 32, 0, stream>>>(x, w, rstd, dy, rows, d, dx);
  CheckLaunch("RmsNormBackwardKernel", stream);
}

}  // namespace sbp::cuda
