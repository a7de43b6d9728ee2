// Elementwise ops, bias and column reductions, sum of squares (CUDA). The
// math is that of kernels/cpu/elementwise.h and kernels/cpu/matmul.h (bias):
//   Add: out = a + b; Axpy: y += alpha x; Scale: x *= s; Fill: x = value;
//   Cast: dst = src (f32 <-> bf16, nearest even); AddBias: y[r, c] += b[c];
//   column sums: partial[g, c] = sum over the rows of group g of x[r, c],
//   then target[c] += sum_g partial[g, c] in double, groups in order;
//   SumSquares: sum_i x_i^2 in double over fixed blocks, added in block order.
// Every kernel loads into fp32 registers and rounds on store; storage may be
// f32 or bf16 per array (kernel_args.h). All results are deterministic.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace sbp::cuda {
namespace {

__global__ void AddKernel(In a, In b, Out out, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    Store(out, i, Load(a, i) + Load(b, i));
  }
}

__global__ void AxpyKernel(float alpha, In x, Out y, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    Store(y, i, Load(y, i) + alpha * Load(x, i));
  }
}

__global__ void ScaleKernel(Out x, float s, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) Store(x, i, Load(x, i) * s);
}

__global__ void FillKernel(Out x, float value, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) Store(x, i, value);
}

__global__ void FillIntKernel(int32_t* x, int32_t value, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) x[i] = value;
}

__global__ void CastKernel(In src, Out dst, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) Store(dst, i, Load(src, i));
}

__global__ void AddBiasKernel(Out y, In bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    Store(y, i, Load(y, i) + Load(bias, i % cols));
  }
}

// grid (column blocks, groups): thread c of group g sums its rows in order.
__global__ void ColumnSumsKernel(In x, int64_t rows, int64_t cols, int64_t rows_per_group,
                                 float* partials) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t g = blockIdx.y;
  if (c >= cols) return;
  const int64_t r0 = g * rows_per_group;
  const int64_t r1 = min(rows, r0 + rows_per_group);
  double acc = 0.0;  // in double like the CPU's column sums: groups can hold 10^4+ rows
  for (int64_t r = r0; r < r1; ++r) acc += Load(x, r * cols + c);
  partials[g * cols + c] = static_cast<float>(acc);
}

__global__ void AddPartialsKernel(const float* partials, int groups, int64_t cols, Out target) {
  for (int64_t c = GlobalThread(); c < cols; c += GridStride()) {
    double sum = 0.0;
    for (int g = 0; g < groups; ++g) sum += partials[g * cols + c];
    Store(target, c, Load(target, c) + static_cast<float>(sum));
  }
}

// Block b sums x^2 over [b * per_block, (b + 1) * per_block) in double.
__global__ void SumSquaresKernel(In x, int64_t n, int64_t per_block, double* partials) {
  __shared__ double scratch[32];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * per_block;
  const int64_t end = min(n, begin + per_block);
  double acc = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = Load(x, i);
    acc += v * v;
  }
  acc = BlockSum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void SumInOrderKernel(const double* partials, int64_t count, double* result) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double sum = 0.0;
  for (int64_t i = 0; i < count; ++i) sum += partials[i];
  *result = sum;
}

}  // namespace

void LaunchAdd(cudaStream_t stream, In a, In b, Out out, int64_t n) {
  if (n == 0) return;
  AddKernel<<<GridFor(n), kThreads, 0, stream>>>(a, b, out, n);
  CheckLaunch("AddKernel", stream);
}

void LaunchAxpy(cudaStream_t stream, float alpha, In x, Out y, int64_t n) {
  if (n == 0) return;
  AxpyKernel<<<GridFor(n), kThreads, 0, stream>>>(alpha, x, y, n);
  CheckLaunch("AxpyKernel", stream);
}

void LaunchScale(cudaStream_t stream, Out x, float s, int64_t n) {
  if (n == 0) return;
  ScaleKernel<<<GridFor(n), kThreads, 0, stream>>>(x, s, n);
  CheckLaunch("ScaleKernel", stream);
}

void LaunchFill(cudaStream_t stream, Out x, float value, int64_t n) {
  if (n == 0) return;
  FillKernel<<<GridFor(n), kThreads, 0, stream>>>(x, value, n);
  CheckLaunch("FillKernel", stream);
}

void LaunchFillInt(cudaStream_t stream, int32_t* x, int32_t value, int64_t n) {
  if (n == 0) return;
  FillIntKernel<<<GridFor(n), kThreads, 0, stream>>>(x, value, n);
  CheckLaunch("FillIntKernel", stream);
}

void LaunchCast(cudaStream_t stream, In src, Out dst, int64_t n) {
  if (n == 0) return;
  CastKernel<<<GridFor(n), kThreads, 0, stream>>>(src, dst, n);
  CheckLaunch("CastKernel", stream);
}

void LaunchAddBias(cudaStream_t stream, Out y, In bias, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  AddBiasKernel<<<GridFor(rows * cols), kThreads, 0, stream>>>(y, bias, rows, cols);
  CheckLaunch("AddBiasKernel", stream);
}

void LaunchColumnSums(cudaStream_t stream, In x, int64_t rows, int64_t cols, int groups,
                      float* partials) {
  if (cols == 0) return;
  const int64_t rows_per_group = (rows + groups - 1) / groups;
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
                  static_cast<unsigned>(groups));
  ColumnSumsKernel<<<grid, kThreads, 0, stream>>>(x, rows, cols, rows_per_group, partials);
  CheckLaunch("ColumnSumsKernel", stream);
}

void LaunchAddPartials(cudaStream_t stream, const float* partials, int groups, int64_t cols,
                       Out target) {
  if (cols == 0) return;
  AddPartialsKernel<<<GridFor(cols), kThreads, 0, stream>>>(partials, groups, cols, target);
  CheckLaunch("AddPartialsKernel", stream);
}

void LaunchSumSquares(cudaStream_t stream, In x, int64_t n, int blocks, double* partials,
                      double* result) {
  const int64_t per_block = (n + blocks - 1) / blocks;
  if (n > 0) {
    SumSquaresKernel<<<blocks, kThreads, 0, stream>>>(x, n, per_block, partials);
    CheckLaunch("SumSquaresKernel", stream);
  }
  SumInOrderKernel<<<1, 32, 0, stream>>>(partials, n > 0 ? blocks : 0, result);
  CheckLaunch("SumInOrderKernel", stream);
}

void LaunchSumInOrder(cudaStream_t stream, const double* values, int64_t count, double* result) {
  SumInOrderKernel<<<1, 32, 0, stream>>>(values, count, result);
  CheckLaunch("SumInOrderKernel", stream);
}

}  // namespace sbp::cuda
