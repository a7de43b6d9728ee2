// Register-blocked micro-kernels for the forward of the tiled CPU attention
// (kernels/cpu/attention.cc), AVX2 + FMA or AVX-512: the two products of a score tile
// without a BLAS call, a few query rows at a time, so that the scores of
// those rows stay in L1 between the products and the online softmax.
//
// K is packed once per call into K^T panels of kKeyPanel keys: panel p holds
// keys [16p, 16p + 16) as [d][16] (zero past the last key), so that a score
// row block is a sum over c of q[r, c] (broadcast) times a panel row (two
// 8-float vectors; AVX-512: two panels, one 16-float vector each): 6 x 16
// scores in 12 accumulator registers (AVX-512: 12 x 32 in 24).
// P V reads V rows in place (their stride is Hkv * d): 6 x 16 (AVX-512:
// 12 x 32) output columns per register block, one broadcast of P per row
// and key. A strip of kMicroRows query rows is what attention.cc hands over.
// The backward uses the same two kernels: scores and dP = dout V^T from K
// and V panels, dq = dS K, and dV += P^T dout, dK += dS^T q as P V over a
// transposed P (p_step below).
//
// Callers check MicroKernelSupported() (this CPU has AVX2 and FMA) before
// calling anything else here; AccumulatePv needs d % 8 == 0.
#pragma once

#include <cstdint>

namespace sbp::cpu::attention_internal {

inline constexpr int64_t kKeyPanel = 16;   // keys per packed K^T panel
inline constexpr int64_t kMicroRows = 12;  // query rows per strip (AVX2: two blocks of 6)

bool MicroKernelSupported();

// The kernels come in two widths: AVX2 + FMA (8 lanes) and AVX-512 (16
// lanes, the same panels two at a time), the widest this CPU has by default.
// Tests force each one the machine can run.
enum class MicroIsa { kAvx2, kAvx512 };
bool MicroIsaSupported(MicroIsa isa);
void SetMicroKernelIsa(MicroIsa isa);  // CHECKs that the CPU has it
MicroIsa MicroKernelIsa();
const char* MicroIsaName(MicroIsa isa);

// The measured choice for a supported CPU (see the .cc): whether the
// micro-kernels at the current ISA beat sgemm in `pass` for head_dim d with
// the OpenBLAS kernels this process loaded.
enum class MicroPass { kForward, kBackward };
bool MicroKernelPreferred(int64_t d, MicroPass pass);

// Floats of the panels of n keys of one head.
inline int64_t KeyPanelFloats(int64_t n, int64_t d) {
  return (n + kKeyPanel - 1) / kKeyPanel * kKeyPanel * d;
}

// Keys [0, n) of one head (row j at k + j * ld, d floats) into panels.
void PackKeyPanels(const float* k, int64_t ld, int64_t n, int64_t d, float* panels);

// s[r, c] = scale * (q row r) . (key 16 * panel0 + c) for r < rows
// (rows <= kMicroRows) and c < 16 * npanels; q row r at q + r * q_ld.
void ScoreRows(const float* q, int64_t q_ld, int64_t rows, int64_t d, const float* panels,
               int64_t panel0, int64_t npanels, float scale, float* s, int64_t s_ld);

// acc[r, :] = (first ? 0 : alpha[r] * acc[r, :]) + sum_{j < cols} p[r * p_ld + j * p_step] v_j
// for r < rows (rows <= kMicroRows); v_j at v + j * v_ld, d floats, d % 8 == 0.
// p_step = 1 is P V over a row-major P; p_ld = 1, p_step = P's leading
// dimension is P^T V (the backward's dV += P^T dout and dK += dS^T q, output
// rows being keys).
void AccumulatePv(const float* p, int64_t p_ld, int64_t p_step, int64_t rows, int64_t cols,
                  const float* v, int64_t v_ld, int64_t d, const float* alpha, bool first,
                  float* acc, int64_t acc_ld);

}  // namespace sbp::cpu::attention_internal
