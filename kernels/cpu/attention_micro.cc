#include "kernels/cpu/attention_micro.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "common/check.h"
#include "kernels/cpu/openblas_core.h"

// Every function that uses AVX2/FMA or AVX-512 carries the target attribute
// itself (no file-wide pragma), so that no inline function of a header is
// compiled for those ISAs here and then picked by the linker for the
// baseline build.
#define SBP_AVX2 __attribute__((target("avx2,fma")))
#define SBP_AVX512 __attribute__((target("avx512f,avx2,fma")))

namespace sbp::cpu::attention_internal {
namespace {

// The kernels always compute a fixed number of rows (AVX2: 6, AVX-512:
// kMicroRows = 12) with named accumulators (an array of vectors would be
// kept in memory by the compiler); a strip of fewer rows repeats its last
// row, whose extra results go to a dummy destination.
constexpr int64_t kAvx2Rows = 6;
static_assert(kMicroRows == 2 * kAvx2Rows);

#define SBP_FOR_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

// s rows [6, 16] of one panel: c_r += q_r[c] * panel[c, 0:16] over c < d.
SBP_AVX2 void ScorePanel(const float* const* q, int64_t d, const float* panel, float scale,
                         float* const* s) {
#define SBP_ZERO(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
  SBP_FOR_ROWS(SBP_ZERO)
#undef SBP_ZERO
  const float *q0 = q[0], *q1 = q[1], *q2 = q[2], *q3 = q[3], *q4 = q[4], *q5 = q[5];
  for (int64_t c = 0; c < d; ++c) {
    const __m256 b0 = _mm256_loadu_ps(panel + c * kKeyPanel);
    const __m256 b1 = _mm256_loadu_ps(panel + c * kKeyPanel + 8);
#define SBP_FMA(r)                                  \
  {                                                 \
    const __m256 a = _mm256_broadcast_ss(q##r + c); \
    c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0);      \
    c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1);      \
  }
    SBP_FOR_ROWS(SBP_FMA)
#undef SBP_FMA
  }
  const __m256 sc = _mm256_set1_ps(scale);
#define SBP_STORE(r)                                  \
  _mm256_storeu_ps(s[r], _mm256_mul_ps(c##r##0, sc)); \
  _mm256_storeu_ps(s[r] + 8, _mm256_mul_ps(c##r##1, sc));
  SBP_FOR_ROWS(SBP_STORE)
#undef SBP_STORE
}

// out rows [6, 8 NV] (NV = 1, 2): c_r = sum over j < cols of p_r[j * p_step] v_j,
// then out_r = c_r (first) or alpha_r out_r + c_r.
template <int NV>
SBP_AVX2 void PvBlock(const float* const* p, int64_t p_step, int64_t cols, const float* v,
                      int64_t v_ld, const float* alpha, bool first, float* const* out) {
#define SBP_ZERO(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
  SBP_FOR_ROWS(SBP_ZERO)
#undef SBP_ZERO
  const float *p0 = p[0], *p1 = p[1], *p2 = p[2], *p3 = p[3], *p4 = p[4], *p5 = p[5];
  for (int64_t j = 0; j < cols; ++j) {
    const __m256 b0 = _mm256_loadu_ps(v + j * v_ld);
    const __m256 b1 = NV == 2 ? _mm256_loadu_ps(v + j * v_ld + 8) : b0;
#define SBP_FMA(r)                                                    \
  {                                                                   \
    const __m256 a = _mm256_broadcast_ss(p##r + j * p_step);          \
    c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0);                        \
    if constexpr (NV == 2) c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1); \
  }
    SBP_FOR_ROWS(SBP_FMA)
#undef SBP_FMA
  }
  // The online softmax's rescale of the earlier keys' sum, fused.
#define SBP_STORE(r)                                                                          \
  if (first) {                                                                                \
    _mm256_storeu_ps(out[r], c##r##0);                                                        \
    if constexpr (NV == 2) _mm256_storeu_ps(out[r] + 8, c##r##1);                             \
  } else {                                                                                    \
    const __m256 a = _mm256_set1_ps(alpha[r]);                                                \
    _mm256_storeu_ps(out[r], _mm256_fmadd_ps(_mm256_loadu_ps(out[r]), a, c##r##0));           \
    if constexpr (NV == 2) {                                                                  \
      _mm256_storeu_ps(out[r] + 8, _mm256_fmadd_ps(_mm256_loadu_ps(out[r] + 8), a, c##r##1)); \
    }                                                                                         \
  }
  SBP_FOR_ROWS(SBP_STORE)
#undef SBP_STORE
}

// AVX-512: the same products 16 lanes wide and on kMicroRows = 12 rows.
// Scores take two panels at a time (12 rows x 32 keys, 24 accumulators of
// the 32 registers); P V takes 32 or 16 output columns.
#define SBP_FOR_ROWS12(X) SBP_FOR_ROWS(X) X(6) X(7) X(8) X(9) X(10) X(11)

SBP_AVX512 void ScorePanelPair(const float* const* q, int64_t d, const float* panel_a,
                               const float* panel_b, float scale, float* const* s) {
#define SBP_ZERO(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps();
  SBP_FOR_ROWS12(SBP_ZERO)
#undef SBP_ZERO
  const float *q0 = q[0], *q1 = q[1], *q2 = q[2], *q3 = q[3], *q4 = q[4], *q5 = q[5];
  const float *q6 = q[6], *q7 = q[7], *q8 = q[8], *q9 = q[9], *q10 = q[10], *q11 = q[11];
  for (int64_t c = 0; c < d; ++c) {
    const __m512 b0 = _mm512_loadu_ps(panel_a + c * kKeyPanel);
    const __m512 b1 = _mm512_loadu_ps(panel_b + c * kKeyPanel);
#define SBP_FMA(r)                             \
  {                                            \
    const __m512 a = _mm512_set1_ps(q##r[c]);  \
    c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0); \
    c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1); \
  }
    SBP_FOR_ROWS12(SBP_FMA)
#undef SBP_FMA
  }
  const __m512 sc = _mm512_set1_ps(scale);
#define SBP_STORE(r)                                  \
  _mm512_storeu_ps(s[r], _mm512_mul_ps(c##r##0, sc)); \
  _mm512_storeu_ps(s[r] + 16, _mm512_mul_ps(c##r##1, sc));
  SBP_FOR_ROWS12(SBP_STORE)
#undef SBP_STORE
}

template <int NV>
SBP_AVX512 void PvBlock512(const float* const* p, int64_t p_step, int64_t cols, const float* v,
                           int64_t v_ld, const float* alpha, bool first, float* const* out) {
#define SBP_ZERO(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps();
  SBP_FOR_ROWS12(SBP_ZERO)
#undef SBP_ZERO
  const float *p0 = p[0], *p1 = p[1], *p2 = p[2], *p3 = p[3], *p4 = p[4], *p5 = p[5];
  const float *p6 = p[6], *p7 = p[7], *p8 = p[8], *p9 = p[9], *p10 = p[10], *p11 = p[11];
  for (int64_t j = 0; j < cols; ++j) {
    const __m512 b0 = _mm512_loadu_ps(v + j * v_ld);
    const __m512 b1 = NV == 2 ? _mm512_loadu_ps(v + j * v_ld + 16) : b0;
#define SBP_FMA(r)                                                    \
  {                                                                   \
    const __m512 a = _mm512_set1_ps(p##r[j * p_step]);                \
    c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);                        \
    if constexpr (NV == 2) c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1); \
  }
    SBP_FOR_ROWS12(SBP_FMA)
#undef SBP_FMA
  }
#define SBP_STORE(r)                                                                            \
  if (first) {                                                                                  \
    _mm512_storeu_ps(out[r], c##r##0);                                                          \
    if constexpr (NV == 2) _mm512_storeu_ps(out[r] + 16, c##r##1);                              \
  } else {                                                                                      \
    const __m512 a = _mm512_set1_ps(alpha[r]);                                                  \
    _mm512_storeu_ps(out[r], _mm512_fmadd_ps(_mm512_loadu_ps(out[r]), a, c##r##0));             \
    if constexpr (NV == 2) {                                                                    \
      _mm512_storeu_ps(out[r] + 16, _mm512_fmadd_ps(_mm512_loadu_ps(out[r] + 16), a, c##r##1)); \
    }                                                                                           \
  }
  SBP_FOR_ROWS12(SBP_STORE)
#undef SBP_STORE
}

std::atomic<MicroIsa>& CurrentIsa() {
  static std::atomic<MicroIsa> isa{MicroIsaSupported(MicroIsa::kAvx512) ? MicroIsa::kAvx512
                                                                        : MicroIsa::kAvx2};
  return isa;
}

#undef SBP_FOR_ROWS12
#undef SBP_FOR_ROWS

}  // namespace

bool MicroIsaSupported(MicroIsa isa) {
#if defined(__GNUC__) && defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  return isa == MicroIsa::kAvx512 ? avx512 : avx2;
#else
  return false;
#endif
}

bool MicroKernelSupported() { return MicroIsaSupported(MicroIsa::kAvx2); }

void SetMicroKernelIsa(MicroIsa isa) {
  CHECK(MicroIsaSupported(isa)) << "this CPU cannot run the " << MicroIsaName(isa)
                                << " micro-kernels";
  CurrentIsa().store(isa);
}

MicroIsa MicroKernelIsa() { return CurrentIsa().load(); }

const char* MicroIsaName(MicroIsa isa) { return isa == MicroIsa::kAvx512 ? "avx512" : "avx2"; }

// Measured on a 2-core Intel Xeon (AVX-512; BENCHMARKS.md, "Attention
// micro-kernels"), micro-kernels against the sgemm path in one process:
//   wider than OpenBLAS's kernels (AVX-512 micro-kernels, OpenBLAS on its
//   AVX2 Haswell kernels): forward 1.40-1.60x, forward + backward 1.33-1.43x;
//   the same width, forward: 1.05-1.11x at d = 64 (AVX-512 against SkylakeX,
//   AVX2 against Haswell, one and two threads), 0.81-1.03x at d = 80 ... 256;
//   the same width, backward: 0.7-0.9x (the dV and dK products read P and dS
//   a column block at a time).
// So the forward takes them where they are wider or d <= 64, the backward
// only where they are wider.
bool MicroKernelPreferred(int64_t d, MicroPass pass) {
  static const bool blas_avx512 = [] {
    const std::string core = OpenBlasCoreName();
    return core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
  }();
  const bool wider = MicroKernelIsa() == MicroIsa::kAvx512 && !blas_avx512;
  if (pass == MicroPass::kBackward) return wider;
  return wider || d <= 64;
}

void PackKeyPanels(const float* k, int64_t ld, int64_t n, int64_t d, float* panels) {
  const int64_t count = (n + kKeyPanel - 1) / kKeyPanel;
  for (int64_t p = 0; p < count; ++p) {
    float* panel = panels + p * kKeyPanel * d;
    const int64_t j0 = p * kKeyPanel;
    const int64_t keys = n - j0 < kKeyPanel ? n - j0 : kKeyPanel;
    if (keys < kKeyPanel) std::memset(panel, 0, sizeof(float) * kKeyPanel * d);
    for (int64_t jj = 0; jj < keys; ++jj) {
      const float* row = k + (j0 + jj) * ld;
      for (int64_t c = 0; c < d; ++c) panel[c * kKeyPanel + jj] = row[c];
    }
  }
}

void ScoreRows(const float* q, int64_t q_ld, int64_t rows, int64_t d, const float* panels,
               int64_t panel0, int64_t npanels, float scale, float* s, int64_t s_ld) {
  CHECK(rows >= 1 && rows <= kMicroRows) << "ScoreRows: " << rows << " rows";
  // Rows past `rows` repeat the last one into s's spare rows (s holds
  // kMicroRows rows).
  const float* qr[kMicroRows];
  float* sr[kMicroRows];
  for (int64_t r = 0; r < kMicroRows; ++r) qr[r] = q + std::min(r, rows - 1) * q_ld;
  auto bind = [&](int64_t p) {
    for (int64_t r = 0; r < kMicroRows; ++r) sr[r] = s + r * s_ld + p * kKeyPanel;
  };
  const float* first = panels + panel0 * kKeyPanel * d;
  int64_t p = 0;
  if (MicroKernelIsa() == MicroIsa::kAvx512) {
    for (; p + 2 <= npanels; p += 2) {
      bind(p);
      ScorePanelPair(qr, d, first + p * kKeyPanel * d, first + (p + 1) * kKeyPanel * d, scale, sr);
    }
  }
  for (; p < npanels; ++p) {
    bind(p);
    for (int64_t half = 0; half < rows; half += kAvx2Rows) {
      ScorePanel(qr + half, d, first + p * kKeyPanel * d, scale, sr + half);
    }
  }
}

void AccumulatePv(const float* p, int64_t p_ld, int64_t p_step, int64_t rows, int64_t cols,
                  const float* v, int64_t v_ld, int64_t d, const float* alpha, bool first,
                  float* acc, int64_t acc_ld) {
  CHECK(rows >= 1 && rows <= kMicroRows) << "AccumulatePv: " << rows << " rows";
  CHECK_EQ(d % 8, 0) << "AccumulatePv: head_dim " << d << " is not a multiple of 8";
  const float* pr[kMicroRows];
  float a[kMicroRows];
  float* out[kMicroRows];
  alignas(64) float spare[32] = {};  // where rows past `rows` go
  for (int64_t r = 0; r < kMicroRows; ++r) {
    pr[r] = p + std::min(r, rows - 1) * p_ld;
    a[r] = alpha[std::min(r, rows - 1)];
  }
  auto bind = [&](int64_t c0) {
    for (int64_t r = 0; r < kMicroRows; ++r) out[r] = r < rows ? acc + r * acc_ld + c0 : spare;
  };
  int64_t c0 = 0;
  if (MicroKernelIsa() == MicroIsa::kAvx512) {
    for (; c0 + 32 <= d; c0 += 32) {
      bind(c0);
      PvBlock512<2>(pr, p_step, cols, v + c0, v_ld, a, first, out);
    }
    if (c0 + 16 <= d) {
      bind(c0);
      PvBlock512<1>(pr, p_step, cols, v + c0, v_ld, a, first, out);
      c0 += 16;
    }
  }
  for (; c0 < d; c0 += 16) {
    bind(c0);
    for (int64_t half = 0; half < rows; half += kAvx2Rows) {
      if (c0 + 16 <= d) {
        PvBlock<2>(pr + half, p_step, cols, v + c0, v_ld, a + half, first, out + half);
      } else {
        PvBlock<1>(pr + half, p_step, cols, v + c0, v_ld, a + half, first, out + half);
      }
    }
  }
}

}  // namespace sbp::cpu::attention_internal
