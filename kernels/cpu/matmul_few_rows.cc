#include "kernels/cpu/matmul_few_rows.h"

#include <algorithm>

#include "kernels/cpu/vector_math.h"

namespace sbp::cpu {
namespace {

// w rows per parallel work item: 64 rows of a 512-wide w are 128 KiB.
constexpr int64_t kRowsPerBlock = 64;

// y[r, j] for rows r0..r0+3 of x and w rows j0..j1: four dot products share
// each load of w[j].
SBP_CPU_CLONES void FourRows(const float* x, int64_t k, const float* w, int64_t j0, int64_t j1,
                             float* y, int64_t ldy, bool accumulate) {
  const float* x0 = x;
  const float* x1 = x + k;
  const float* x2 = x + 2 * k;
  const float* x3 = x + 3 * k;
  for (int64_t j = j0; j < j1; ++j) {
    const float* wj = w + j * k;
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
    for (int64_t i = 0; i < k; ++i) {
      s0 += x0[i] * wj[i];
      s1 += x1[i] * wj[i];
      s2 += x2[i] * wj[i];
      s3 += x3[i] * wj[i];
    }
    if (accumulate) {
      y[j] += s0;
      y[ldy + j] += s1;
      y[2 * ldy + j] += s2;
      y[3 * ldy + j] += s3;
    } else {
      y[j] = s0;
      y[ldy + j] = s1;
      y[2 * ldy + j] = s2;
      y[3 * ldy + j] = s3;
    }
  }
}

SBP_CPU_CLONES void OneRow(const float* x, int64_t k, const float* w, int64_t j0, int64_t j1,
                           float* y, bool accumulate) {
  for (int64_t j = j0; j < j1; ++j) {
    const float* wj = w + j * k;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < k; ++i) s += x[i] * wj[i];
    y[j] = accumulate ? y[j] + s : s;
  }
}

}  // namespace

void MatmulXWtFewRows(const float* x, int64_t n, const float* w, int64_t m, int64_t k, float* y,
                      bool accumulate) {
  const int64_t blocks = (m + kRowsPerBlock - 1) / kRowsPerBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * kRowsPerBlock, j1 = std::min(m, j0 + kRowsPerBlock);
    int64_t r = 0;
    for (; r + 4 <= n; r += 4) FourRows(x + r * k, k, w, j0, j1, y + r * m, m, accumulate);
    for (; r < n; ++r) OneRow(x + r * k, k, w, j0, j1, y + r * m, accumulate);
  }
}

}  // namespace sbp::cpu
