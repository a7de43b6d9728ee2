// Device-side helpers shared by the .cu files: f32/bf16 loads and stores,
// warp and block reductions, and launch sizes. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_args.h"
#include "kernels/documents.h"

namespace sbp::cuda {

inline constexpr int kThreads = 256;  // block size of the elementwise kernels

// Blocks for a grid-stride loop over n elements (at least 1, at most 2^20).
inline unsigned GridFor(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > (int64_t{1} << 20)) blocks = int64_t{1} << 20;
  return static_cast<unsigned>(blocks);
}

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ float Load(In a, int64_t i) {
  if (a.type == ElemType::kBF16) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(a.data)[i]);
  }
  return static_cast<const float*>(a.data)[i];
}
__device__ __forceinline__ float Load(Out a, int64_t i) { return Load(In{a.data, a.type}, i); }
// Rounds to nearest even for bf16 (as FloatToBf16 on the host).
__device__ __forceinline__ void Store(Out a, int64_t i, float v) {
  if (a.type == ElemType::kBF16) {
    static_cast<__nv_bfloat16*>(a.data)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<float*>(a.data)[i] = v;
  }
}

template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `scratch` holds 32 values. The order of additions
// depends on the block size only, so results are reproducible.
template <typename T>
__device__ T BlockSum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  return WarpSum(total);
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = lane < warps ? scratch[lane] : -INFINITY;
  return WarpMax(m);
}

// Packed documents of an attention call (AttentionArgs::doc_offsets): the
// first key that sequence row p sees (its document's start; 0 without
// documents), and one past the last query row that sees key j (the end of
// j's document; `limit` without documents).
__device__ __forceinline__ int64_t FirstKey(const AttentionArgs& a, int64_t p) {
  return a.doc_offsets != nullptr ? DocumentStart(a.doc_offsets, a.doc_count, p) : 0;
}
__device__ __forceinline__ int64_t KeyDocumentEnd(const AttentionArgs& a, int64_t j,
                                                  int64_t limit) {
  return a.doc_offsets != nullptr ? DocumentEnd(a.doc_offsets, a.doc_count, j, limit) : limit;
}

}  // namespace sbp::cuda
