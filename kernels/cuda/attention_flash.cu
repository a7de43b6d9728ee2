// Causal GQA attention on tensor cores (CUDA, sm_80+): bf16 q, k, v (and
// dout), head_dim 64 or 128, fp32 accumulation. Same contract as the generic
// kernels in attention.cu (see kernels/backend.h); outputs may be stored as
// f32 or bf16, lse and delta are f32.
//
// Tiles: 64 query rows x 64 key rows per step (the dk/dv kernel: 64 key rows
// x 32 query rows), 4 warps, each warp owning 16 rows; products are WMMA
// 16x16x16 bf16 fragments with fp32 accumulators.
// Shared-memory rows are padded (8 bf16 / 4 floats) against bank conflicts.
// The lanes of a warp treat its 16 rows element by element in pairs: lane
// 2r + h owns row r, columns [h * n/2, (h + 1) * n/2) of an n-wide tile.
//
// Forward (one block per (query tile, head), longest tiles first):
//   S = Q K^T (fragments), s = scale * S in log2 units, online softmax per
//   row: m' = max(m, max_j s_j), alpha = 2^(m - m'), P = 2^(s - m') (bf16),
//   l = alpha l + sum_j P_j; O (fp32 in shared memory) = alpha O + P V.
//   out = O / l, lse = (m + log2 l) ln 2.
// Backward, with P = exp(scale S - lse) and delta = rowsum(dout * out):
//   dq kernel (one block per (query tile, head)): dP = dO V^T,
//     dS = P (dP - delta), dq = scale dS K, fragments kept in registers;
//   dk/dv kernel (one block per (key tile, KV head), over every query head of
//     the group and every query tile that sees the keys): S^T = K Q^T,
//     dP^T = V dO^T, dV += P^T dO, dK += dS^T Q; dk += scale dK, dv += dV.
//     Its Q/dO tiles (with their lse and delta) are double-buffered: cp.async
//     loads the next step's tiles while the current step computes.
// dq, dk and dv elements are each owned by one warp: no atomics, results do
// not depend on scheduling. Packed documents (AttentionArgs::doc_offsets):
// row i sees keys [FirstKey(q_offset + i), q_offset + i]; key tiles before a
// query tile's first document and query tiles past a key tile's last
// document are skipped.
#include <mma.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace sbp::cuda {
namespace {

using nvcuda::wmma::accumulator;
using nvcuda::wmma::col_major;
using nvcuda::wmma::fill_fragment;
using nvcuda::wmma::fragment;
using nvcuda::wmma::load_matrix_sync;
using nvcuda::wmma::matrix_a;
using nvcuda::wmma::matrix_b;
using nvcuda::wmma::mem_row_major;
using nvcuda::wmma::mma_sync;
using nvcuda::wmma::row_major;
using nvcuda::wmma::store_matrix_sync;
using bf16 = __nv_bfloat16;

constexpr int kTileRows = 64;  // query or key rows per tile
constexpr int kWarps = 4;
constexpr int kBlockThreads = kWarps * 32;
constexpr int kPadH = 8;                 // bf16 padding per shared row
constexpr int kPadF = 4;                 // float padding per shared row
constexpr int kLds = kTileRows + kPadF;  // row stride of a per-warp [16][64] float tile
constexpr int kLdp = kTileRows + kPadH;  // row stride of a per-warp [16][64] bf16 tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr unsigned kFull = 0xffffffffu;

using FragA = fragment<matrix_a, 16, 16, 16, bf16, row_major>;
using FragBRow = fragment<matrix_b, 16, 16, 16, bf16, row_major>;
using FragBCol = fragment<matrix_b, 16, 16, 16, bf16, col_major>;
using FragC = fragment<accumulator, 16, 16, 16, float>;

template <int D>
struct Dims {
  static constexpr int kLdh = D + kPadH;  // row stride of a [64][D] bf16 tile
  static constexpr int kLdo = D + kPadF;  // row stride of a [16][D] float tile
  static constexpr int kTileElems = kTileRows * kLdh;
  // Per-warp float scratch: two [16][64] tiles, also used as one [16][D] tile.
  static constexpr int kWarpFloats = 2 * 16 * kLds > 16 * kLdo ? 2 * 16 * kLds : 16 * kLdo;
};

// dst [64][D + 8] <- rows [r0, r0 + 64) of head `head` of src [rows, heads, D]
// in 16-byte vectors; rows at or beyond `limit` are zero.
template <int D>
__device__ void LoadTile(const bf16* src, int64_t r0, int64_t limit, int64_t heads, int64_t head,
                         bf16* dst) {
  constexpr int kPerRow = D / 8;
  for (int idx = threadIdx.x; idx < kTileRows * kPerRow; idx += blockDim.x) {
    const int r = idx / kPerRow, c = (idx % kPerRow) * 8;
    const int64_t row = r0 + r;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (row < limit) value = *reinterpret_cast<const uint4*>(src + (row * heads + head) * D + c);
    *reinterpret_cast<uint4*>(dst + r * Dims<D>::kLdh + c) = value;
  }
}

// cp.async (sm_80+): a 16-byte (.cg, through L2 only) or 4-byte (.ca) copy
// from global to shared memory that completes asynchronously. With `valid`
// false nothing is read (src-size 0) and the destination is zero-filled; src
// must then still be a valid global address. A thread's copies are grouped by
// CpAsyncCommit; CpAsyncWaitAll waits for all of this thread's groups, and
// only a __syncthreads() after it makes every thread's copies visible.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsync4(void* dst, const void* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// LoadTile with cp.async into a [Rows][D + 8] tile: rows at or beyond `limit`
// are zero-filled without being read.
template <int D, int Rows>
__device__ void LoadTileAsync(const bf16* src, int64_t r0, int64_t limit, int64_t heads,
                              int64_t head, bf16* dst) {
  constexpr int kPerRow = D / 8;
  for (int idx = threadIdx.x; idx < Rows * kPerRow; idx += blockDim.x) {
    const int r = idx / kPerRow, c = (idx % kPerRow) * 8;
    const int64_t row = r0 + r;
    const bool valid = row < limit;
    CpAsync16(dst + r * Dims<D>::kLdh + c, valid ? src + (row * heads + head) * D + c : src, valid);
  }
}

// c [16][N] (ld Ldc, float) = a rows (16 x D, row-major, ld lda) times the
// transpose of b rows (N x D, row-major, ld ldb).
template <int D, int N = kTileRows, int Ldc = kLds>
__device__ void RowsTimesRowsT(const bf16* a, int lda, const bf16* b, int ldb, float* c) {
#pragma unroll
  for (int n = 0; n < N / 16; ++n) {
    FragC acc;
    fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      FragA fa;
      FragBCol fb;
      load_matrix_sync(fa, a + kk * 16, lda);
      load_matrix_sync(fb, b + n * 16 * ldb + kk * 16, ldb);
      mma_sync(acc, fa, fb, acc);
    }
    store_matrix_sync(c + n * 16, acc, Ldc, mem_row_major);
  }
}

// acc[n] += p (16 x K bf16, ld Ldp) times rows (K x D bf16, ld ldr).
template <int D, int K = kTileRows, int Ldp = kLdp>
__device__ void AccumulatePTimesRows(const bf16* p, const bf16* rows, int ldr, FragC* acc) {
  FragA fp[K / 16];
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) load_matrix_sync(fp[kk], p + kk * 16, Ldp);
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      FragBRow fb;
      load_matrix_sync(fb, rows + kk * 16 * ldr + n * 16, ldr);
      mma_sync(acc[n], fp[kk], fb, acc[n]);
    }
  }
}

template <int D>
constexpr size_t ForwardSharedBytes() {
  return sizeof(bf16) * 3 * Dims<D>::kTileElems +
         kWarps * (sizeof(float) * 16 * kLds + sizeof(bf16) * 16 * kLdp +
                   sizeof(float) * 16 * Dims<D>::kLdo);
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    FlashForwardKernel(AttentionArgs a, Out out, float* lse) {
  using Dm = Dims<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* s_q = reinterpret_cast<bf16*>(smem);
  bf16* s_k = s_q + Dm::kTileElems;
  bf16* s_v = s_k + Dm::kTileElems;
  float* s_s = reinterpret_cast<float*>(s_v + Dm::kTileElems);      // [warps][16][kLds]
  bf16* s_p = reinterpret_cast<bf16*>(s_s + kWarps * 16 * kLds);    // [warps][16][kLdp]
  float* s_o = reinterpret_cast<float*>(s_p + kWarps * 16 * kLdp);  // [warps][16][kLdo]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* s_s_w = s_s + warp * 16 * kLds;
  bf16* s_p_w = s_p + warp * 16 * kLdp;
  float* s_o_w = s_o + warp * 16 * Dm::kLdo;

  const int64_t h = blockIdx.y, hk = h / (a.hq / a.hkv);
  const int64_t i0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kTileRows;
  const bf16* q = static_cast<const bf16*>(a.q);
  const bf16* k = static_cast<const bf16*>(a.k);
  const bf16* v = static_cast<const bf16*>(a.v);
  LoadTile<D>(q, i0, a.tq, a.hq, h, s_q);
  for (int idx = lane; idx < 16 * Dm::kLdo; idx += 32) s_o_w[idx] = 0.0f;

  const int r = lane >> 1, half = lane & 1;
  const int64_t i = i0 + warp * 16 + r;
  // Keys row i sees: [visible_begin, visible_end).
  const int64_t visible_end = i < a.tq ? min(a.tk, a.q_offset + i + 1) : 0;
  const int64_t visible_begin = i < a.tq ? FirstKey(a, a.q_offset + i) : 0;
  const int64_t key_end = min(a.tk, a.q_offset + min(i0 + kTileRows, a.tq));
  const float scale2 = a.scale * kLog2e;
  float m = -INFINITY, l = 0.0f;
  const int64_t key_begin = FirstKey(a, a.q_offset + i0) / kTileRows * kTileRows;
  for (int64_t j0 = key_begin; j0 < key_end; j0 += kTileRows) {
    __syncthreads();  // the previous K/V tile is consumed (and Q is loaded)
    LoadTile<D>(k, j0, key_end, a.hkv, hk, s_k);
    LoadTile<D>(v, j0, key_end, a.hkv, hk, s_v);
    __syncthreads();
    RowsTimesRowsT<D>(s_q + warp * 16 * Dm::kLdh, Dm::kLdh, s_k, Dm::kLdh, s_s_w);
    __syncwarp();
    const int c0 = half * 32;
    const int64_t n_vis = min(int64_t{kTileRows}, max(int64_t{0}, visible_end - j0));
    const int64_t lo_vis = visible_begin - j0;  // columns below are another document
    float tile_max = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      if (c0 + c < n_vis && c0 + c >= lo_vis) {
        tile_max = fmaxf(tile_max, s_s_w[r * kLds + c0 + c] * scale2);
      }
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFull, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    float alpha = 1.0f, row_sum = 0.0f;
    if (m_new != -INFINITY) alpha = exp2f(m - m_new);  // 0 while m is -inf
    for (int c = 0; c < 32; ++c) {
      float p = 0.0f;
      if (c0 + c < n_vis && c0 + c >= lo_vis) p = exp2f(s_s_w[r * kLds + c0 + c] * scale2 - m_new);
      row_sum += p;
      s_p_w[r * kLdp + c0 + c] = __float2bfloat16_rn(p);
    }
    row_sum += __shfl_xor_sync(kFull, row_sum, 1);
    l = l * alpha + row_sum;
    m = m_new;
    for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) s_o_w[r * Dm::kLdo + c] *= alpha;
    __syncwarp();
    // O += P V, with O's fragments loaded from and stored back to shared memory.
    FragC acc[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      load_matrix_sync(acc[n], s_o_w + n * 16, Dm::kLdo, mem_row_major);
    }
    AccumulatePTimesRows<D>(s_p_w, s_v, Dm::kLdh, acc);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      store_matrix_sync(s_o_w + n * 16, acc[n], Dm::kLdo, mem_row_major);
    }
    __syncwarp();
  }
  __syncwarp();
  if (i >= a.tq) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) {
    Store(out, (i * a.hq + h) * D + c, s_o_w[r * Dm::kLdo + c] * inv);
  }
  if (lse != nullptr && half == 0) {
    lse[i * a.hq + h] = l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY;
  }
}

template <int D>
constexpr size_t DqSharedBytes() {
  return sizeof(bf16) * 4 * Dims<D>::kTileElems +
         kWarps * (sizeof(float) * Dims<D>::kWarpFloats + sizeof(bf16) * 16 * kLdp);
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    FlashDqKernel(AttentionArgs a, const bf16* dout, const float* lse, const float* delta, Out dq) {
  using Dm = Dims<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* s_q = reinterpret_cast<bf16*>(smem);
  bf16* s_do = s_q + Dm::kTileElems;
  bf16* s_k = s_do + Dm::kTileElems;
  bf16* s_v = s_k + Dm::kTileElems;
  float* s_f = reinterpret_cast<float*>(s_v + Dm::kTileElems);           // [warps][kWarpFloats]
  bf16* s_ds = reinterpret_cast<bf16*>(s_f + kWarps * Dm::kWarpFloats);  // [warps][16][kLdp]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* s_s_w = s_f + warp * Dm::kWarpFloats;  // S, then the dq tile
  float* s_dp_w = s_s_w + 16 * kLds;
  bf16* s_ds_w = s_ds + warp * 16 * kLdp;

  const int64_t h = blockIdx.y, hk = h / (a.hq / a.hkv);
  const int64_t i0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kTileRows;
  const bf16* k = static_cast<const bf16*>(a.k);
  const bf16* v = static_cast<const bf16*>(a.v);
  LoadTile<D>(static_cast<const bf16*>(a.q), i0, a.tq, a.hq, h, s_q);
  LoadTile<D>(dout, i0, a.tq, a.hq, h, s_do);

  const int r = lane >> 1, half = lane & 1;
  const int64_t i = i0 + warp * 16 + r;
  const int64_t visible_end = i < a.tq ? min(a.tk, a.q_offset + i + 1) : 0;
  const int64_t visible_begin = i < a.tq ? FirstKey(a, a.q_offset + i) : 0;
  const float lse2 = i < a.tq ? lse[i * a.hq + h] * kLog2e : 0.0f;
  const float delta_i = i < a.tq ? delta[i * a.hq + h] : 0.0f;
  const int64_t key_end = min(a.tk, a.q_offset + min(i0 + kTileRows, a.tq));
  const float scale2 = a.scale * kLog2e;
  FragC acc[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) fill_fragment(acc[n], 0.0f);
  const int64_t key_begin = FirstKey(a, a.q_offset + i0) / kTileRows * kTileRows;
  for (int64_t j0 = key_begin; j0 < key_end; j0 += kTileRows) {
    __syncthreads();
    LoadTile<D>(k, j0, key_end, a.hkv, hk, s_k);
    LoadTile<D>(v, j0, key_end, a.hkv, hk, s_v);
    __syncthreads();
    RowsTimesRowsT<D>(s_q + warp * 16 * Dm::kLdh, Dm::kLdh, s_k, Dm::kLdh, s_s_w);
    RowsTimesRowsT<D>(s_do + warp * 16 * Dm::kLdh, Dm::kLdh, s_v, Dm::kLdh, s_dp_w);
    __syncwarp();
    const int c0 = half * 32;
    const int64_t n_vis = min(int64_t{kTileRows}, max(int64_t{0}, visible_end - j0));
    const int64_t lo_vis = visible_begin - j0;  // columns below are another document
    for (int c = 0; c < 32; ++c) {
      float ds = 0.0f;
      if (c0 + c < n_vis && c0 + c >= lo_vis) {
        const float p = exp2f(s_s_w[r * kLds + c0 + c] * scale2 - lse2);
        ds = p * (s_dp_w[r * kLds + c0 + c] - delta_i);
      }
      s_ds_w[r * kLdp + c0 + c] = __float2bfloat16_rn(ds);
    }
    __syncwarp();
    AccumulatePTimesRows<D>(s_ds_w, s_k, Dm::kLdh, acc);
    __syncwarp();
  }
  __syncwarp();
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
    store_matrix_sync(s_s_w + n * 16, acc[n], Dm::kLdo, mem_row_major);
  __syncwarp();
  if (i >= a.tq) return;
  for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) {
    Store(dq, (i * a.hq + h) * D + c, a.scale * s_s_w[r * Dm::kLdo + c]);
  }
}

// dk/dv kernel: 64 key rows per block (16 per warp), 32 query rows per step.
constexpr int kDkvRows = 32;             // query rows per dk/dv step
constexpr int kLdsQ = kDkvRows + kPadF;  // row stride of a per-warp [16][32] float tile
constexpr int kLdpQ = kDkvRows + kPadH;  // row stride of a per-warp [16][32] bf16 tile

template <int D>
struct DkvDims {
  static constexpr int kQTileElems = kDkvRows * Dims<D>::kLdh;  // a [32][D + 8] bf16 Q or dO tile
  // The epilogue stages each warp's [16][D + 4] f32 dk/dv tile over the Q/dO
  // buffers.
  static_assert(kWarps * 16 * Dims<D>::kLdo * sizeof(float) <= 4 * kQTileElems * sizeof(bf16),
                "the dk/dv staging fits over the Q/dO buffers");
  // Minimum blocks per SM asked of ptxas. For D = 128, 128 threads of at most
  // 255 registers already allow 2 blocks (2 x 128 x 256 = 65,536 registers);
  // asking for 2 only changed ptxas's choices (CUDA 13: 8 bytes of spills on
  // sm_80, none without). For D = 64, 3 blocks (at most 168 registers) match
  // what shared memory allows on sm_90.
  static constexpr int kMinBlocks = D == 64 ? 3 : 1;
};

// Shared memory of the dk/dv kernel, bytes per block (D = 128 | D = 64):
//   K, V        2 x [64][D + 8] bf16                 34,816 | 18,432
//   Q, dO       2 buffers x 2 x [32][D + 8] bf16     34,816 | 18,432
//   S^T, dP^T   4 warps x 2 x [16][36] f32           18,432 | 18,432
//   P^T, dS^T   4 warps x 2 x [16][40] bf16          10,240 | 10,240
//   lse, delta  2 buffers x 2 x [32] f32                512 |    512
//   total                                            98,816 | 66,048
// With the 1 KiB the driver reserves per block, an sm_90 SM (228 KiB) holds
// 2 blocks of D = 128 (2 x 99,840 <= 233,472; still 2 if the 1 KiB of static
// shared memory that cuobjdump lists for sm_90 kernels counts on top) and 3
// of D = 64. Before (64 query rows per step, one Q/dO buffer, per warp
// [16][68] f32 S^T and dP^T tiles also holding the [16][D + 4] dk/dv staging,
// and [16][72] bf16 P^T, dS^T) it was 123,392 | 90,624 bytes: 1 block of
// D = 128 per SM. Now the epilogue stages each warp's [16][D + 4] f32 dk/dv
// tile over the Q/dO buffers, which are free by then.
template <int D>
constexpr size_t DkvSharedBytes() {
  constexpr size_t kTiles = 2 * Dims<D>::kTileElems + 4 * DkvDims<D>::kQTileElems;
  constexpr size_t kPerWarp = sizeof(float) * 2 * 16 * kLdsQ + sizeof(bf16) * 2 * 16 * kLdpQ;
  return sizeof(bf16) * kTiles + kWarps * kPerWarp + sizeof(float) * 2 * 2 * kDkvRows;
}
static_assert(2 * (DkvSharedBytes<128>() + 2 * 1024) <= 233472, "2 dk/dv blocks per sm_90 SM");

// Numerics: as before, P and dS are computed in f32 from f32 S^T and dP^T and
// rounded to bf16 for the MMAs; the MMAs accumulate dK and dV in the same
// order of 16-query slices, so results are unchanged by the 32-row steps.
template <int D>
__global__ void __launch_bounds__(kBlockThreads, DkvDims<D>::kMinBlocks)
    FlashDkvKernel(AttentionArgs a, const bf16* dout, const float* lse, const float* delta, Out dk,
                   Out dv) {
  using Dm = Dims<D>;
  constexpr int kQTile = DkvDims<D>::kQTileElems;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* s_k = reinterpret_cast<bf16*>(smem);
  bf16* s_v = s_k + Dm::kTileElems;
  bf16* s_qdo = s_v + Dm::kTileElems;                                     // [2][Q, dO][32][kLdh]
  float* s_st = reinterpret_cast<float*>(s_qdo + 4 * kQTile);             // [warps][16][kLdsQ]
  float* s_dpt = s_st + kWarps * 16 * kLdsQ;                              // [warps][16][kLdsQ]
  bf16* s_pt = reinterpret_cast<bf16*>(s_dpt + kWarps * 16 * kLdsQ);      // [warps][16][kLdpQ]
  bf16* s_dst = s_pt + kWarps * 16 * kLdpQ;                               // [warps][16][kLdpQ]
  float* s_rows = reinterpret_cast<float*>(s_dst + kWarps * 16 * kLdpQ);  // [2][lse, delta][32]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* s_st_w = s_st + warp * 16 * kLdsQ;
  float* s_dpt_w = s_dpt + warp * 16 * kLdsQ;
  bf16* s_pt_w = s_pt + warp * 16 * kLdpQ;
  bf16* s_dst_w = s_dst + warp * 16 * kLdpQ;

  const int64_t hk = blockIdx.y, group = a.hq / a.hkv;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const int64_t key_limit = min(a.tk, a.q_offset + a.tq);
  const bf16* q = static_cast<const bf16*>(a.q);

  const int r = lane >> 1, half = lane & 1;
  const int64_t j = j0 + warp * 16 + r;
  const float scale2 = a.scale * kLog2e;
  FragC acc_k[D / 16], acc_v[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    fill_fragment(acc_k[n], 0.0f);
    fill_fragment(acc_v[n], 0.0f);
  }
  const int64_t i_begin = max(int64_t{0}, j0 - a.q_offset);
  // Queries from the end of the last key's document on see no key of the tile;
  // those at or past the end of key j's document do not see j.
  const int64_t j_last = min(j0 + kTileRows, key_limit) - 1;
  const int64_t i_end = min(a.tq, KeyDocumentEnd(a, j_last, key_limit) - a.q_offset);
  const int64_t j_doc_end = j < key_limit ? KeyDocumentEnd(a, j, key_limit) : 0;
  // Step t = g * q_steps + s covers query head hk * group + g, rows
  // [i_begin + 32 s, i_begin + 32 (s + 1)), from buffer t % 2.
  const int64_t q_steps = i_end > i_begin ? (i_end - i_begin + kDkvRows - 1) / kDkvRows : 0;
  const int64_t steps = group * q_steps;
  // Starts (and commits as one group) the copies of step t's Q, dO, lse and
  // delta into buffer t % 2; rows at or past tq are zero.
  auto prefetch = [&](int64_t t) {
    const int64_t h = hk * group + t / q_steps;
    const int64_t i0 = i_begin + (t % q_steps) * kDkvRows;
    bf16* s_q_t = s_qdo + (t & 1) * 2 * kQTile;
    LoadTileAsync<D, kDkvRows>(q, i0, a.tq, a.hq, h, s_q_t);
    LoadTileAsync<D, kDkvRows>(dout, i0, a.tq, a.hq, h, s_q_t + kQTile);
    if (threadIdx.x < kDkvRows) {
      const int64_t row = i0 + threadIdx.x;
      const bool valid = row < a.tq;
      const int64_t at = valid ? row * a.hq + h : 0;
      float* s_rows_t = s_rows + (t & 1) * 2 * kDkvRows;
      CpAsync4(s_rows_t + threadIdx.x, lse + at, valid);
      CpAsync4(s_rows_t + kDkvRows + threadIdx.x, delta + at, valid);
    }
    CpAsyncCommit();
  };
  if (steps > 0) prefetch(0);
  // K and V stay for the whole block; these loads overlap step 0's copies.
  LoadTile<D>(static_cast<const bf16*>(a.k), j0, key_limit, a.hkv, hk, s_k);
  LoadTile<D>(static_cast<const bf16*>(a.v), j0, key_limit, a.hkv, hk, s_v);
  for (int64_t t = 0; t < steps; ++t) {
    CpAsyncWaitAll();  // this thread's copies for step t have landed
    // Now every thread's copies (and K, V) are visible, and every warp is
    // done with step t - 1, the last reader of buffer (t + 1) % 2.
    __syncthreads();
    if (t + 1 < steps) prefetch(t + 1);  // runs while step t computes
    const int64_t i0 = i_begin + (t % q_steps) * kDkvRows;
    const bf16* s_q_t = s_qdo + (t & 1) * 2 * kQTile;
    const bf16* s_do_t = s_q_t + kQTile;
    const float* s_lse_t = s_rows + (t & 1) * 2 * kDkvRows;
    const float* s_delta_t = s_lse_t + kDkvRows;
    RowsTimesRowsT<D, kDkvRows, kLdsQ>(s_k + warp * 16 * Dm::kLdh, Dm::kLdh, s_q_t, Dm::kLdh,
                                       s_st_w);
    RowsTimesRowsT<D, kDkvRows, kLdsQ>(s_v + warp * 16 * Dm::kLdh, Dm::kLdh, s_do_t, Dm::kLdh,
                                       s_dpt_w);
    __syncwarp();
    const int c0 = half * (kDkvRows / 2);
    for (int c = 0; c < kDkvRows / 2; ++c) {
      const int col = c0 + c;
      const int64_t qi = i0 + col;
      float p = 0.0f, ds = 0.0f;
      if (j < key_limit && qi < a.tq && j <= a.q_offset + qi && a.q_offset + qi < j_doc_end) {
        // lse * log2(e) rounded on its own (never fused), as when it was
        // stored scaled.
        p = exp2f(s_st_w[r * kLdsQ + col] * scale2 - __fmul_rn(s_lse_t[col], kLog2e));
        ds = p * (s_dpt_w[r * kLdsQ + col] - s_delta_t[col]);
      }
      s_pt_w[r * kLdpQ + col] = __float2bfloat16_rn(p);
      s_dst_w[r * kLdpQ + col] = __float2bfloat16_rn(ds);
    }
    __syncwarp();
    AccumulatePTimesRows<D, kDkvRows, kLdpQ>(s_pt_w, s_do_t, Dm::kLdh, acc_v);
    AccumulatePTimesRows<D, kDkvRows, kLdpQ>(s_dst_w, s_q_t, Dm::kLdh, acc_k);
    __syncwarp();
  }
  // Every warp is done with the Q/dO buffers and no copy is in flight (the
  // last step waited for its own and started none): they hold the staging.
  __syncthreads();
  float* s_out_w = reinterpret_cast<float*>(s_qdo) + warp * 16 * Dm::kLdo;
  const bool owned = j < key_limit;
  // dk += scale dK, then dv += dV, each through the warp's float staging.
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    store_matrix_sync(s_out_w + n * 16, acc_k[n], Dm::kLdo, mem_row_major);
  }
  __syncwarp();
  if (owned) {
    for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) {
      const int64_t idx = (j * a.hkv + hk) * D + c;
      Store(dk, idx, Load(dk, idx) + a.scale * s_out_w[r * Dm::kLdo + c]);
    }
  }
  __syncwarp();
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    store_matrix_sync(s_out_w + n * 16, acc_v[n], Dm::kLdo, mem_row_major);
  }
  __syncwarp();
  if (owned) {
    for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) {
      const int64_t idx = (j * a.hkv + hk) * D + c;
      Store(dv, idx, Load(dv, idx) + s_out_w[r * Dm::kLdo + c]);
    }
  }
}

// Whether the device lets a block use `bytes` of shared memory; raises the
// kernel's limit when so.
template <typename Kernel>
bool PrepareSharedBytes(Kernel kernel, size_t bytes) {
  int device = 0, optin = 0;
  SBP_CUDA_CHECK(cudaGetDevice(&device));
  SBP_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > static_cast<size_t>(optin)) return false;
  SBP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
  return true;
}

unsigned Tiles(int64_t rows) { return static_cast<unsigned>((rows + kTileRows - 1) / kTileRows); }

template <int D>
bool Forward(cudaStream_t stream, const AttentionArgs& a, Out out, float* lse) {
  constexpr size_t bytes = ForwardSharedBytes<D>();
  if (!PrepareSharedBytes(FlashForwardKernel<D>, bytes)) return false;
  FlashForwardKernel<D>
      <<<dim3(Tiles(a.tq), static_cast<unsigned>(a.hq)), kBlockThreads, bytes, stream>>>(a, out,
                                                                                         lse);
  CheckLaunch("FlashForwardKernel", stream);
  return true;
}

template <int D>
bool Backward(cudaStream_t stream, const AttentionArgs& a, const bf16* dout, const float* lse,
              const float* delta, Out dq, Out dk, Out dv) {
  constexpr size_t dq_bytes = DqSharedBytes<D>();
  constexpr size_t kv_bytes = DkvSharedBytes<D>();
  if (!PrepareSharedBytes(FlashDqKernel<D>, dq_bytes) ||
      !PrepareSharedBytes(FlashDkvKernel<D>, kv_bytes)) {
    return false;
  }
  FlashDqKernel<D>
      <<<dim3(Tiles(a.tq), static_cast<unsigned>(a.hq)), kBlockThreads, dq_bytes, stream>>>(
          a, dout, lse, delta, dq);
  CheckLaunch("FlashDqKernel", stream);
  const int64_t key_limit = a.tk < a.q_offset + a.tq ? a.tk : a.q_offset + a.tq;
  if (key_limit > 0) {
    FlashDkvKernel<D>
        <<<dim3(Tiles(key_limit), static_cast<unsigned>(a.hkv)), kBlockThreads, kv_bytes, stream>>>(
            a, dout, lse, delta, dk, dv);
    CheckLaunch("FlashDkvKernel", stream);
  }
  return true;
}

// Blocks of FlashDkvKernel<D> per SM at its launch configuration; 0 when its
// shared memory does not fit the device.
template <int D>
int DkvBlocksPerSm() {
  constexpr size_t bytes = DkvSharedBytes<D>();
  if (!PrepareSharedBytes(FlashDkvKernel<D>, bytes)) return 0;
  int blocks = 0;
  SBP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, FlashDkvKernel<D>,
                                                               kBlockThreads, bytes));
  return blocks;
}

}  // namespace

int FlashBackwardDkDvBlocksPerSm(int head_dim) {
  if (head_dim == 64) return DkvBlocksPerSm<64>();
  if (head_dim == 128) return DkvBlocksPerSm<128>();
  return 0;
}

bool LaunchAttentionForwardFlash(cudaStream_t stream, const AttentionArgs& a, Out out, float* lse) {
  if (a.tq == 0 || a.hq == 0) return true;
  if (a.d == 64) return Forward<64>(stream, a, out, lse);
  if (a.d == 128) return Forward<128>(stream, a, out, lse);
  return false;
}

bool LaunchAttentionBackwardFlash(cudaStream_t stream, const AttentionArgs& a, const void* dout,
                                  const float* lse, const float* delta, Out dq, Out dk, Out dv) {
  if (a.tq == 0 || a.hq == 0) return true;
  const bf16* g = static_cast<const bf16*>(dout);
  if (a.d == 64) return Backward<64>(stream, a, g, lse, delta, dq, dk, dv);
  if (a.d == 128) return Backward<128>(stream, a, g, lse, delta, dq, dk, dv);
  return false;
}

}  // namespace sbp::cuda
