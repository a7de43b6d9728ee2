#include "kernels/cpu/attention_tiles.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

// With GCC each function below is compiled three times (AVX-512, AVX2+FMA,
// baseline) and an ifunc resolver picks one when the library is loaded; other
// compilers get the baseline build only.
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define SBP_TILE_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SBP_TILE_CLONES
#endif

namespace sbp::cpu::attention_internal {
namespace {

// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2]
// (ln 2 split in two so that n * kLn2Hi is exact); exp(r) by its degree-7
// Taylor polynomial (truncation error < 5e-9 relative); 2^n added to the
// exponent bits. Branch-free so that loops over it vectorise.
__attribute__((always_inline)) inline float ExpInline(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;      // 355/512, 9 significant bits
  constexpr float kLn2Lo = -2.12194440e-4f;   // ln 2 - kLn2Hi
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: + then - rounds (no -ffast-math)
  constexpr float kLow = -87.0f;
  constexpr float kHigh = 88.0f;
  float xc = x < kLow ? kLow : x;
  xc = xc > kHigh ? kHigh : xc;
  const float n = (xc * kLog2e + kRoundMagic) - kRoundMagic;
  float r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = std::bit_cast<int32_t>(p) + (static_cast<int32_t>(n) << 23);
  const float y = std::bit_cast<float>(bits);
  return x < kLow ? 0.0f : y;
}

// max of x[0..n), n >= 1. A GCC vector of 16 floats holds 16 running maxima
// (one zmm register on AVX-512, two ymm on AVX2): an ordered scalar max
// reduction would not vectorise without reassociation flags.
typedef float Float16 __attribute__((vector_size(64)));

__attribute__((always_inline)) inline float RowMax(const float* x, int64_t n) {
  constexpr int64_t kLanes = 16;
  float mx = x[0];
  int64_t c = 0;
  if (n >= kLanes) {
    Float16 lanes;
    std::memcpy(&lanes, x, sizeof(lanes));
    for (c = kLanes; c + kLanes <= n; c += kLanes) {
      Float16 v;
      std::memcpy(&v, x + c, sizeof(v));
      lanes = v > lanes ? v : lanes;
    }
    for (int64_t u = 0; u < kLanes; ++u) mx = lanes[u] > mx ? lanes[u] : mx;
  }
  for (; c < n; ++c) mx = x[c] > mx ? x[c] : mx;
  return mx;
}

}  // namespace

float FastExp(float x) { return ExpInline(x); }

SBP_TILE_CLONES
void OnlineSoftmaxTile(float* s, int64_t ld, int64_t rows, int64_t cols, int64_t diag, float* m,
                       float* l, float* alpha) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * ld;
    const int64_t n = Visible(diag, r, cols);
    if (n == 0) {
      for (int64_t c = 0; c < cols; ++c) row[c] = 0.0f;
      alpha[r] = 1.0f;
      continue;
    }
    const float m_new = std::max(m[r], RowMax(row, n));
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < n; ++c) {
      const float e = ExpInline(row[c] - m_new);
      row[c] = e;
      sum += e;
    }
    for (int64_t c = n; c < cols; ++c) row[c] = 0.0f;
    const float a = ExpInline(m[r] - m_new);  // 0 when m[r] = -inf
    alpha[r] = a;
    l[r] = l[r] * a + sum;
    m[r] = m_new;
  }
}

SBP_TILE_CLONES
void ScaleRows(float* acc, int64_t ld, int64_t rows, int64_t cols, const float* alpha) {
  for (int64_t r = 0; r < rows; ++r) {
    const float a = alpha[r];
    if (a == 1.0f) continue;
    float* row = acc + r * ld;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) row[c] *= a;
  }
}

SBP_TILE_CLONES
void FinishRows(const float* acc, int64_t acc_ld, int64_t rows, int64_t d, const float* m,
                const float* l, float* out, int64_t out_ld, float* lse, int64_t lse_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = 1.0f / l[r];
    const float* a = acc + r * acc_ld;
    float* o = out + r * out_ld;
#pragma omp simd
    for (int64_t c = 0; c < d; ++c) o[c] = a[c] * inv;
    if (lse != nullptr) lse[r * lse_stride] = m[r] + std::log(l[r]);
  }
}

SBP_TILE_CLONES
void ProbabilitiesTile(float* s, int64_t ld, int64_t rows, int64_t cols, int64_t diag,
                       const float* lse, int64_t lse_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * ld;
    const int64_t n = Visible(diag, r, cols);
    const float shift = lse[r * lse_stride];
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) row[c] = ExpInline(row[c] - shift);
    for (int64_t c = n; c < cols; ++c) row[c] = 0.0f;
  }
}

SBP_TILE_CLONES
void SoftmaxGradTile(const float* p, float* dp, int64_t ld, int64_t rows, int64_t cols,
                     const float* delta, int64_t delta_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * ld;
    float* dr = dp + r * ld;
    const float dl = delta[r * delta_stride];
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) dr[c] = pr[c] * (dr[c] - dl);
  }
}

SBP_TILE_CLONES
void RowDots(const float* a, const float* b, int64_t ld, int64_t rows, int64_t d, float* delta) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* ar = a + r * ld;
    const float* br = b + r * ld;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < d; ++c) sum += ar[c] * br[c];
    delta[r] = sum;
  }
}

SBP_TILE_CLONES
void AddRows(const float* x, int64_t x_ld, float* y, int64_t y_ld, int64_t rows, int64_t cols,
             bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_ld;
    float* yr = y + r * y_ld;
    if (accumulate) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) yr[c] += xr[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c];
    }
  }
}

}  // namespace sbp::cpu::attention_internal
