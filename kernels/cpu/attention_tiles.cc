#include "kernels/cpu/attention_tiles.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/vector_math.h"

// Each function below is compiled for AVX-512, AVX2+FMA and baseline x86-64
// (SBP_CPU_CLONES, kernels/cpu/vector_math.h).
#define SBP_TILE_CLONES SBP_CPU_CLONES

namespace sbp::cpu::attention_internal {

using vector_math::ExpInline;
using vector_math::RowMax;

float FastExp(float x) { return ExpInline(x); }

SBP_TILE_CLONES
void OnlineSoftmaxTile(float* s, int64_t ld, int64_t rows, int64_t cols, int64_t diag, float* m,
                       float* l, float* alpha, const int64_t* lo) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * ld;
    const int64_t n = Visible(diag, r, cols);
    const int64_t c0 = FirstVisible(lo, r, cols);
    if (n <= c0) {
      for (int64_t c = 0; c < cols; ++c) row[c] = 0.0f;
      alpha[r] = 1.0f;
      continue;
    }
    for (int64_t c = 0; c < c0; ++c) row[c] = 0.0f;
    const float m_new = std::max(m[r], RowMax(row + c0, n - c0));
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = c0; c < n; ++c) {
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
                       const float* lse, int64_t lse_stride, const int64_t* lo) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * ld;
    const int64_t n = Visible(diag, r, cols);
    const int64_t c0 = std::min(FirstVisible(lo, r, cols), n);
    const float shift = lse[r * lse_stride];
    for (int64_t c = 0; c < c0; ++c) row[c] = 0.0f;
#pragma omp simd
    for (int64_t c = c0; c < n; ++c) row[c] = ExpInline(row[c] - shift);
    for (int64_t c = n; c < cols; ++c) row[c] = 0.0f;
  }
}

SBP_TILE_CLONES
void SoftmaxGradTile(const float* p, float* dp, int64_t ld, int64_t rows, int64_t cols,
                     const float* delta, int64_t delta_stride, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * ld;
    float* dr = dp + r * ld;
    const float dl = delta[r * delta_stride];
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) dr[c] = scale * (pr[c] * (dr[c] - dl));
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
