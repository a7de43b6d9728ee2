// Element-wise work on one score tile of the tiled attention in
// kernels/cpu/attention.cc: everything between the GEMMs. The loops are written
// so that the compiler vectorises them, and each function is compiled for
// AVX-512, AVX2 and baseline x86-64 with the best chosen at load time.
//
// A tile holds `rows` query rows and `cols` key columns, row-major with leading
// dimension `ld`. The causal mask of a tile is one number, `diag`: row r sees
// its first Visible(diag, r, cols) = clamp(diag + r, 0, cols) columns, where
// diag = (q_offset + first query row) - (first key column) + 1. A tile with
// diag >= cols is unmasked. Packed documents add a lower bound: when `lo` is
// non-null, row r sees only columns [clamp(lo[r], 0, cols), Visible(...)) (its
// document starts at column lo[r]). Masked entries of P and dS are written as 0.
#pragma once

#include <algorithm>
#include <cstdint>

namespace sbp::cpu::attention_internal {

inline int64_t Visible(int64_t diag, int64_t r, int64_t cols) {
  return std::clamp<int64_t>(diag + r, 0, cols);
}

// The first visible column of row r: 0 without documents.
inline int64_t FirstVisible(const int64_t* lo, int64_t r, int64_t cols) {
  return lo == nullptr ? 0 : std::clamp<int64_t>(lo[r], 0, cols);
}

// exp(x) for x in [-inf, 88], relative error below 2.5e-7; returns 0 for
// x < -87 (where exp(x) < 2e-38). Exposed for tests.
float FastExp(float x);

// Online-softmax step of the forward pass. On entry s [rows, ld] holds scaled
// scores; m, l [rows] the running row max and sum of exp (m = -inf, l = 0
// before the first tile). On return s holds P = exp(s - m_new) (0 where
// masked), m and l are updated and alpha [rows] = exp(m_old - m_new) is the
// factor by which the row's output accumulator must be rescaled.
void OnlineSoftmaxTile(float* s, int64_t ld, int64_t rows, int64_t cols, int64_t diag, float* m,
                       float* l, float* alpha, const int64_t* lo = nullptr);

// acc [rows, ld] row r *= alpha[r] over `cols` columns.
void ScaleRows(float* acc, int64_t ld, int64_t rows, int64_t cols, const float* alpha);

// Forward epilogue: out row r = acc row r / l[r] ([rows, d], out leading
// dimension out_ld) and, when lse is non-null, lse[r * lse_stride] = m[r] + log l[r].
void FinishRows(const float* acc, int64_t acc_ld, int64_t rows, int64_t d, const float* m,
                const float* l, float* out, int64_t out_ld, float* lse, int64_t lse_stride);

// Backward: s [rows, ld] scaled scores -> P = exp(s - lse[r * lse_stride]), 0 where masked.
void ProbabilitiesTile(float* s, int64_t ld, int64_t rows, int64_t cols, int64_t diag,
                       const float* lse, int64_t lse_stride, const int64_t* lo = nullptr);

// Backward: dp [rows, ld] -> dS = scale * P * (dp - delta[r * delta_stride])
// (0 where P is 0).
void SoftmaxGradTile(const float* p, float* dp, int64_t ld, int64_t rows, int64_t cols,
                     const float* delta, int64_t delta_stride, float scale = 1.0f);

// delta[r] = dot(a row r, b row r) over d columns; rows of a and b have
// leading dimension ld.
void RowDots(const float* a, const float* b, int64_t ld, int64_t rows, int64_t d, float* delta);

// y [rows, y_ld] (+)= x [rows, x_ld] over `cols` columns: add when
// accumulate, copy otherwise.
void AddRows(const float* x, int64_t x_ld, float* y, int64_t y_ld, int64_t rows, int64_t cols,
             bool accumulate);

}  // namespace sbp::cpu::attention_internal
