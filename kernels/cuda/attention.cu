// Causal GQA attention with a query offset (CUDA): the generic kernels, for
// any head dim up to kGenericMaxHeadDim and f32 or bf16 storage, fp32 math.
// The contract is Backend::AttentionForward/AttentionBackward
// (kernels/backend.h); the tensor-core kernels (attention_flash.cu) take the
// bf16 head_dim 64/128 case and these take everything else.
//
// Forward: a block of 8 warps takes 8 consecutive query rows of one head
// (one warp per row); key tiles of 32 rows go through shared memory; lane j
// scores key j of the tile, an online softmax keeps (m, l) per row and each
// lane accumulates d/32 output columns:
//   s_ij = scale q_i.k_j, m' = max(m, max_j s_ij), alpha = exp(m - m'),
//   l = alpha l + sum_j exp(s_ij - m'), acc = alpha acc + sum_j exp(s_ij - m') v_j,
//   out_i = acc / l, lse_i = m + log l.
// Backward (P = exp(s - lse), delta_i = dout_i.out_i, dS = P (dout v^T - delta)):
//   dq kernel: the forward's layout; dq_i = scale sum_j dS_ij k_j (written);
//   dk/dv kernel: one warp per key row, query tiles of 32 rows through shared
//   memory, over every query head of the key's group:
//   dk_j += scale sum_i dS_ij q_i, dv_j += sum_i P_ij dout_i (accumulated).
// No T x T matrix; each dq, dk, dv element is owned by one thread (no atomics).
// Packed documents (AttentionArgs::doc_offsets): query i also needs
// j >= FirstKey(q_offset + i); key tiles before a block's first document and
// query tiles past a key block's last document are skipped.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace sbp::cuda {
namespace {

constexpr int kRows = 8;   // warps per block: query rows (forward, dq) or key rows (dk/dv)
constexpr int kTile = 32;  // keys (forward, dq) or queries (dk/dv) per shared tile
constexpr int kPerLane = kGenericMaxHeadDim / 32;
constexpr unsigned kFull = 0xffffffffu;

// `first`: the first key query i sees (FirstKey).
__device__ __forceinline__ bool Visible(const AttentionArgs& a, int64_t i, int64_t j,
                                        int64_t first) {
  return i < a.tq && j < a.tk && j <= a.q_offset + i && j >= first;
}

// The first key tile (a multiple of `tile`) that a block of queries from row i0 reads.
__device__ __forceinline__ int64_t FirstKeyTile(const AttentionArgs& a, int64_t i0, int tile) {
  return FirstKey(a, a.q_offset + i0) / tile * tile;
}

// dst [count][ld] <- rows [r0, r0 + count) of head `head` of src [rows, heads, d]
// as float; rows at or beyond `limit` are zero. The whole block takes part.
__device__ void LoadRows(In src, int64_t r0, int count, int64_t limit, int64_t heads, int64_t head,
                         int d, float* dst, int ld) {
  for (int idx = threadIdx.x; idx < count * d; idx += blockDim.x) {
    const int r = idx / d, c = idx % d;
    const int64_t row = r0 + r;
    dst[r * ld + c] = row < limit ? Load(src, (row * heads + head) * d + c) : 0.0f;
  }
}

__device__ __forceinline__ float Dot(const float* a, const float* b, int d) {
  float s = 0.0f;
  for (int c = 0; c < d; ++c) s += a[c] * b[c];
  return s;
}

__global__ void __launch_bounds__(kRows * 32) ForwardKernel(AttentionArgs a, Out out, float* lse) {
  extern __shared__ float smem[];
  const int d = static_cast<int>(a.d), ld = d + 1;
  float* s_k = smem;              // [kTile][ld]
  float* s_v = s_k + kTile * ld;  // [kTile][ld]
  float* s_q = s_v + kTile * ld;  // [kRows][d]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t h = blockIdx.y, hk = h / (a.hq / a.hkv);
  const int64_t i0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kRows;  // longest first
  const int64_t i = i0 + warp;
  LoadRows(In{a.q, a.q_type}, i0, kRows, a.tq, a.hq, h, d, s_q, d);
  const float* q_row = s_q + warp * d;
  const int64_t key_end = min(a.tk, a.q_offset + min(i0 + kRows, a.tq));
  float m = -INFINITY, l = 0.0f;
  float acc[kPerLane];
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) acc[u] = 0.0f;
  const int64_t first = i < a.tq ? FirstKey(a, a.q_offset + i) : 0;
  for (int64_t j0 = FirstKeyTile(a, i0, kTile); j0 < key_end; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and s_q is loaded)
    LoadRows(In{a.k, a.k_type}, j0, kTile, key_end, a.hkv, hk, d, s_k, ld);
    LoadRows(In{a.v, a.v_type}, j0, kTile, key_end, a.hkv, hk, d, s_v, ld);
    __syncthreads();
    const int64_t j = j0 + lane;
    const float s = Visible(a, i, j, first) ? Dot(q_row, s_k + lane * ld, d) * a.scale : -INFINITY;
    const float m_new = fmaxf(m, WarpMax(s));
    if (m_new == -INFINITY) continue;  // nothing visible yet (uniform in the warp)
    const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
    const float alpha = expf(m - m_new);  // 0 while m is -inf
    l = l * alpha + WarpSum(p);
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) acc[u] *= alpha;
    for (int jj = 0; jj < kTile; ++jj) {
      const float pj = __shfl_sync(kFull, p, jj);
      if (pj == 0.0f) continue;
      const float* v_row = s_v + jj * ld;
#pragma unroll
      for (int u = 0; u < kPerLane; ++u) {
        const int c = lane + 32 * u;
        if (c < d) acc[u] += pj * v_row[c];
      }
    }
    m = m_new;
  }
  if (i >= a.tq) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    const int c = lane + 32 * u;
    if (c < d) Store(out, (i * a.hq + h) * d + c, acc[u] * inv);
  }
  if (lse != nullptr && lane == 0) lse[i * a.hq + h] = l > 0.0f ? m + logf(l) : -INFINITY;
}

__global__ void __launch_bounds__(kRows * 32)
    DqKernel(AttentionArgs a, In dout, const float* lse, const float* delta, Out dq) {
  extern __shared__ float smem[];
  const int d = static_cast<int>(a.d), ld = d + 1;
  float* s_k = smem;              // [kTile][ld]
  float* s_v = s_k + kTile * ld;  // [kTile][ld]
  float* s_q = s_v + kTile * ld;  // [kRows][d]
  float* s_do = s_q + kRows * d;  // [kRows][d]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t h = blockIdx.y, hk = h / (a.hq / a.hkv);
  const int64_t i0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kRows;
  const int64_t i = i0 + warp;
  LoadRows(In{a.q, a.q_type}, i0, kRows, a.tq, a.hq, h, d, s_q, d);
  LoadRows(dout, i0, kRows, a.tq, a.hq, h, d, s_do, d);
  const float* q_row = s_q + warp * d;
  const float* do_row = s_do + warp * d;
  const float lse_i = i < a.tq ? lse[i * a.hq + h] : 0.0f;
  const float delta_i = i < a.tq ? delta[i * a.hq + h] : 0.0f;
  const int64_t key_end = min(a.tk, a.q_offset + min(i0 + kRows, a.tq));
  float acc[kPerLane];
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) acc[u] = 0.0f;
  const int64_t first = i < a.tq ? FirstKey(a, a.q_offset + i) : 0;
  for (int64_t j0 = FirstKeyTile(a, i0, kTile); j0 < key_end; j0 += kTile) {
    __syncthreads();
    LoadRows(In{a.k, a.k_type}, j0, kTile, key_end, a.hkv, hk, d, s_k, ld);
    LoadRows(In{a.v, a.v_type}, j0, kTile, key_end, a.hkv, hk, d, s_v, ld);
    __syncthreads();
    const int64_t j = j0 + lane;
    float ds = 0.0f;
    if (Visible(a, i, j, first)) {
      const float p = expf(Dot(q_row, s_k + lane * ld, d) * a.scale - lse_i);
      ds = p * (Dot(do_row, s_v + lane * ld, d) - delta_i);
    }
    for (int jj = 0; jj < kTile; ++jj) {
      const float dsj = __shfl_sync(kFull, ds, jj);
      if (dsj == 0.0f) continue;
      const float* k_row = s_k + jj * ld;
#pragma unroll
      for (int u = 0; u < kPerLane; ++u) {
        const int c = lane + 32 * u;
        if (c < d) acc[u] += dsj * k_row[c];
      }
    }
  }
  if (i >= a.tq) return;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    const int c = lane + 32 * u;
    if (c < d) Store(dq, (i * a.hq + h) * d + c, a.scale * acc[u]);
  }
}

__global__ void __launch_bounds__(kRows * 32)
    DkvKernel(AttentionArgs a, In dout, const float* lse, const float* delta, Out dk, Out dv) {
  extern __shared__ float smem[];
  const int d = static_cast<int>(a.d), ld = d + 1;
  float* s_q = smem;               // [kTile][ld]
  float* s_do = s_q + kTile * ld;  // [kTile][ld]
  float* s_k = s_do + kTile * ld;  // [kRows][d]
  float* s_v = s_k + kRows * d;    // [kRows][d]
  float* s_lse = s_v + kRows * d;  // [kTile]
  float* s_delta = s_lse + kTile;  // [kTile]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t hk = blockIdx.y, group = a.hq / a.hkv;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t j = j0 + warp;
  // Keys at or beyond q_offset + tq are seen by no query of this call.
  const int64_t key_limit = min(a.tk, a.q_offset + a.tq);
  LoadRows(In{a.k, a.k_type}, j0, kRows, key_limit, a.hkv, hk, d, s_k, d);
  LoadRows(In{a.v, a.v_type}, j0, kRows, key_limit, a.hkv, hk, d, s_v, d);
  const float* k_row = s_k + warp * d;
  const float* v_row = s_v + warp * d;
  float acc_k[kPerLane], acc_v[kPerLane];
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) acc_k[u] = acc_v[u] = 0.0f;
  // The first query that sees key j0 is j0 - q_offset; queries from the end
  // of the last key's document on see none of the block's keys.
  const int64_t i_begin = max(int64_t{0}, j0 - a.q_offset);
  const int64_t j_last = min(j0 + kRows, key_limit) - 1;
  const int64_t i_end = min(a.tq, KeyDocumentEnd(a, j_last, key_limit) - a.q_offset);
  // Queries at or past the end of key j's document do not see it.
  const int64_t j_doc_end = j < key_limit ? KeyDocumentEnd(a, j, key_limit) : 0;
  for (int64_t g = 0; g < group; ++g) {
    const int64_t h = hk * group + g;
    for (int64_t i0 = i_begin; i0 < i_end; i0 += kTile) {
      __syncthreads();
      LoadRows(In{a.q, a.q_type}, i0, kTile, a.tq, a.hq, h, d, s_q, ld);
      LoadRows(dout, i0, kTile, a.tq, a.hq, h, d, s_do, ld);
      if (threadIdx.x < kTile) {
        const int64_t row = i0 + threadIdx.x;
        s_lse[threadIdx.x] = row < a.tq ? lse[row * a.hq + h] : 0.0f;
        s_delta[threadIdx.x] = row < a.tq ? delta[row * a.hq + h] : 0.0f;
      }
      __syncthreads();
      const int64_t i = i0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (j < key_limit && Visible(a, i, j, 0) && a.q_offset + i < j_doc_end) {
        p = expf(Dot(s_q + lane * ld, k_row, d) * a.scale - s_lse[lane]);
        ds = p * (Dot(s_do + lane * ld, v_row, d) - s_delta[lane]);
      }
      for (int ii = 0; ii < kTile; ++ii) {
        const float pi = __shfl_sync(kFull, p, ii);
        const float dsi = __shfl_sync(kFull, ds, ii);
        if (pi == 0.0f && dsi == 0.0f) continue;
        const float* q_i = s_q + ii * ld;
        const float* do_i = s_do + ii * ld;
#pragma unroll
        for (int u = 0; u < kPerLane; ++u) {
          const int c = lane + 32 * u;
          if (c < d) {
            acc_v[u] += pi * do_i[c];
            acc_k[u] += dsi * q_i[c];
          }
        }
      }
    }
  }
  if (j >= key_limit) return;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    const int c = lane + 32 * u;
    if (c < d) {
      const int64_t idx = (j * a.hkv + hk) * d + c;
      Store(dk, idx, Load(dk, idx) + a.scale * acc_k[u]);
      Store(dv, idx, Load(dv, idx) + acc_v[u]);
    }
  }
}

// delta[r] = sum_c dout[r, c] * out[r, c] over rows r of [rows, d]; one warp per row.
__global__ void DeltaKernel(In dout, In out, int64_t rows, int64_t d, float* delta) {
  const int lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRows + (threadIdx.x >> 5);
  if (r >= rows) return;
  float s = 0.0f;
  for (int64_t c = lane; c < d; c += 32) s += Load(dout, r * d + c) * Load(out, r * d + c);
  s = WarpSum(s);
  if (lane == 0) delta[r] = s;
}

// Raises a kernel's dynamic shared-memory limit when it needs more than 48 KiB.
template <typename Kernel>
void AllowSharedBytes(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024) {
    SBP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
  }
}

unsigned Blocks(int64_t rows) { return static_cast<unsigned>((rows + kRows - 1) / kRows); }

}  // namespace

void LaunchAttentionForwardGeneric(cudaStream_t stream, const AttentionArgs& a, Out out,
                                   float* lse) {
  if (a.tq == 0 || a.hq == 0) return;
  const size_t bytes = sizeof(float) * (2 * kTile * (a.d + 1) + kRows * a.d);
  AllowSharedBytes(ForwardKernel, bytes);
  const dim3 grid(Blocks(a.tq), static_cast<unsigned>(a.hq));
  ForwardKernel<<<grid, kRows * 32, bytes, stream>>>(a, out, lse);
  CheckLaunch("attention ForwardKernel", stream);
}

void LaunchAttentionDelta(cudaStream_t stream, In dout, In out, int64_t rows, int64_t d,
                          float* delta) {
  if (rows == 0) return;
  DeltaKernel<<<Blocks(rows), kRows * 32, 0, stream>>>(dout, out, rows, d, delta);
  CheckLaunch("attention DeltaKernel", stream);
}

void LaunchAttentionBackwardGeneric(cudaStream_t stream, const AttentionArgs& a, In dout,
                                    const float* lse, const float* delta, Out dq, Out dk, Out dv) {
  if (a.tq == 0 || a.hq == 0) return;
  const size_t dq_bytes = sizeof(float) * (2 * kTile * (a.d + 1) + 2 * kRows * a.d);
  AllowSharedBytes(DqKernel, dq_bytes);
  DqKernel<<<dim3(Blocks(a.tq), static_cast<unsigned>(a.hq)), kRows * 32, dq_bytes, stream>>>(
      a, dout, lse, delta, dq);
  CheckLaunch("attention DqKernel", stream);
  const int64_t key_limit = a.tk < a.q_offset + a.tq ? a.tk : a.q_offset + a.tq;
  if (key_limit <= 0) return;
  const size_t kv_bytes = sizeof(float) * (2 * kTile * (a.d + 1) + 2 * kRows * a.d + 2 * kTile);
  AllowSharedBytes(DkvKernel, kv_bytes);
  DkvKernel<<<dim3(Blocks(key_limit), static_cast<unsigned>(a.hkv)), kRows * 32, kv_bytes,
              stream>>>(a, dout, lse, delta, dk, dv);
  CheckLaunch("attention DkvKernel", stream);
}

}  // namespace sbp::cuda
