// Causal grouped-query attention on the CPU, fp32, flash-attention style
// (the contract is Backend::AttentionForward/AttentionBackward in
// kernels/backend.h; CpuBackend delegates here).
//
// Shapes: q, out, dout, dq [Tq, Hq, d]; k, v, dk, dv [Tk, Hkv, d]; lse [Tq, Hq].
// q holds sequence rows [q_offset, q_offset + Tq); k and v rows [0, Tk) with
// Tk >= q_offset + Tq, of which only the first q_offset + Tq are read (and,
// for dk, dv, accumulated into). Query i sees keys j <= q_offset + i; query
// head h reads KV head h / (Hq / Hkv) (K and V are never repeated).
//
// Forward:  s_ij = scale q_i.k_j,  lse_i = log sum_j exp(s_ij),
//           out_i = sum_j exp(s_ij - lse_i) v_j.
// Saved for backward: lse (plus the inputs and out).
// Backward: P = exp(s - lse), delta_i = dout_i.out_i, dP = dout v^T,
//           dS = P * (dP - delta);  dq = scale dS k (written),
//           dk += scale dS^T q, dv += P^T dout (accumulated, so that query
//           chunks called one after the other sum their contributions).
//
// Tiling: query tiles of kAttentionTileQ rows times key tiles of
// kAttentionTileK keys, one score tile at a time with an online softmax; per
// thread the scratch is two [TileQ, TileK] tiles and one [TileQ, d], never
// Tq x Tk. Key tiles above the diagonal are skipped; tiles crossing it are
// done in strips of 32 rows (forward) or keys (backward) so that little
// masked work is computed. Forward is parallel over (head, query tile),
// longest first. Backward is parallel over (KV head, key tile): each thread
// owns its dk/dv rows, and the dq contributions of the key tiles are added to
// each dq tile in key-tile order (a ticket per dq tile), which makes dq
// race-free and every result bit-for-bit independent of the thread count.
// Backward also keeps delta [Tq, Hq] (the size of lse) for the whole call.
//
// Packed documents (doc_offsets non-null, host i32, kernels/documents.h):
// query i at sequence row p = q_offset + i sees keys [DocumentStart(p), p]
// (block-diagonal causal). Key tiles before the first document of a query
// tile and query tiles after the last document of a key tile are skipped;
// tiles that straddle a boundary mask each row's document start.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace sbp::cpu {

// Tile sizes (rows of queries, keys) of both passes; 256 x 256 measured best
// on AVX-512 OpenBLAS kernels (see BENCHMARKS.md).
inline constexpr int64_t kAttentionTileQ = 256;
inline constexpr int64_t kAttentionTileK = 256;

// The products per score tile, in both passes: OpenBLAS sgemm calls, or the
// register-blocked AVX2 + FMA / AVX-512 micro-kernels of
// kernels/cpu/attention_micro.h (K, and for the backward V, packed once per
// call into panels; the scores of a few query rows at a time stay in L1
// between their products and the softmax). kAuto picks by CPU and shape
// (AttentionForwardUsesMicroKernel,
// AttentionBackwardUsesMicroKernel); the others force a path (tests, benchmarks).
// The micro-kernels need AVX2 + FMA and a head_dim that is a multiple of 8:
// where they cannot run, kMicroKernel takes sgemm.
enum class AttentionKernel { kAuto, kBlas, kMicroKernel };
void SetAttentionKernel(AttentionKernel kernel);
AttentionKernel AttentionKernelChoice();
// Whether a forward / backward with head_dim d takes the micro-kernels now.
bool AttentionForwardUsesMicroKernel(int64_t d);
bool AttentionBackwardUsesMicroKernel(int64_t d);

// out [Tq, Hq, d] = causal softmax(scale q k^T) v; lse [Tq, Hq] when non-null.
void AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_offset,
                      float scale, Tensor& out, Tensor* lse, const Tensor* doc_offsets = nullptr);

// Gradients of AttentionForward: dq written, dk and dv accumulated (+=).
void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& dout, const Tensor& lse, int64_t q_offset, float scale,
                       Tensor& dq, Tensor& dk, Tensor& dv, const Tensor* doc_offsets = nullptr);

}  // namespace sbp::cpu
