#include "kernels/cpu/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_few_rows.h"
#include "kernels/cpu/op_checks.h"

namespace sbp::cpu {
namespace {

constexpr int64_t kBiasColumnBlock = 64;

// Number of rows of a [..., cols] tensor.
int64_t RowCount(const Tensor& t, const char* name) {
  CHECK(t.rank() >= 1) << name << " must have at least one dim, got " << t.DebugString();
  int64_t rows = 1;
  for (int i = 0; i + 1 < t.rank(); ++i) rows *= t.dim(i);
  return rows;
}

void CheckWeight(const Tensor& w, const char* name) {
  CheckHostF32(w, name);
  CHECK_EQ(w.rank(), 2) << name << " must be [M, K], got " << w.DebugString();
}

int BlasInt(int64_t n) {
  CHECK_LE(n, static_cast<int64_t>(INT_MAX)) << "matrix dimension too large for BLAS";
  return static_cast<int>(n);
}

// c [m, n] (row-major, leading dim n) = alpha * op(a) op(b) + beta c, with
// the degenerate cases handled here (BLAS rejects a zero leading dimension).
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0.0f) std::memset(c, 0, static_cast<size_t>(m * n) * sizeof(float));
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, BlasInt(m), BlasInt(n), BlasInt(k), 1.0f, a,
              BlasInt(lda), b, BlasInt(ldb), beta, c, BlasInt(n));
}

}  // namespace

void MatmulXWt(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate) {
  CheckHostF32(x, "x");
  CheckWeight(w, "w");
  CheckHostF32(y, "y");
  const int64_t m = w.dim(0), k = w.dim(1);
  const int64_t n = RowCount(x, "x");
  CHECK(x.dim(-1) == k && y.dim(-1) == m && RowCount(y, "y") == n)
      << "MatmulXWt: y " << y.DebugString() << " = x " << x.DebugString() << " . w^T "
      << w.DebugString();
  if (UseFewRowsMatmul(n, m * k)) {
    MatmulXWtFewRows(x.data<float>(), n, w.data<float>(), m, k, y.data<float>(), accumulate);
    return;
  }
  Sgemm(false, true, n, m, k, x.data<float>(), k, w.data<float>(), k, accumulate ? 1.0f : 0.0f,
        y.data<float>());
}

void MatmulDyW(const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate) {
  CheckHostF32(dy, "dy");
  CheckWeight(w, "w");
  CheckHostF32(dx, "dx");
  const int64_t m = w.dim(0), k = w.dim(1);
  const int64_t n = RowCount(dy, "dy");
  CHECK(dy.dim(-1) == m && dx.dim(-1) == k && RowCount(dx, "dx") == n)
      << "MatmulDyW: dx " << dx.DebugString() << " = dy " << dy.DebugString() << " . w "
      << w.DebugString();
  Sgemm(false, false, n, k, m, dy.data<float>(), m, w.data<float>(), k, accumulate ? 1.0f : 0.0f,
        dx.data<float>());
}

void MatmulAccumDyTX(const Tensor& dy, const Tensor& x, Tensor& dw) {
  CheckHostF32(dy, "dy");
  CheckHostF32(x, "x");
  CheckWeight(dw, "dw");
  const int64_t m = dw.dim(0), k = dw.dim(1);
  const int64_t n = RowCount(dy, "dy");
  CHECK(dy.dim(-1) == m && x.dim(-1) == k && RowCount(x, "x") == n)
      << "MatmulAccumDyTX: dw " << dw.DebugString() << " += dy^T " << dy.DebugString() << " . x "
      << x.DebugString();
  Sgemm(true, false, m, k, n, dy.data<float>(), m, x.data<float>(), k, 1.0f, dw.data<float>());
}

void AddBias(Tensor& y, const Tensor& bias) {
  CheckHostF32(y, "y");
  CheckHostF32(bias, "bias");
  const int64_t m = bias.numel();
  CHECK(bias.rank() == 1 && y.rank() >= 1 && y.dim(-1) == m)
      << "AddBias: y " << y.DebugString() << " += bias " << bias.DebugString();
  const int64_t n = RowCount(y, "y");
  const float* b = bias.data<float>();
  float* ys = y.data<float>();
#pragma omp parallel for schedule(static) if (n * m >= kParallelMinElements)
  for (int64_t r = 0; r < n; ++r) {
    float* yr = ys + r * m;
    for (int64_t j = 0; j < m; ++j) yr[j] += b[j];
  }
}

void BiasBackward(const Tensor& dy, Tensor& dbias) {
  CheckHostF32(dy, "dy");
  CheckHostF32(dbias, "dbias");
  const int64_t m = dbias.numel();
  CHECK(dbias.rank() == 1 && dy.rank() >= 1 && dy.dim(-1) == m)
      << "BiasBackward: dbias " << dbias.DebugString() << " += column sums of dy "
      << dy.DebugString();
  const int64_t n = RowCount(dy, "dy");
  const float* g = dy.data<float>();
  float* db = dbias.data<float>();
  const int64_t blocks = (m + kBiasColumnBlock - 1) / kBiasColumnBlock;
#pragma omp parallel for schedule(static) if (n * m >= kParallelMinElements)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kBiasColumnBlock;
    const int64_t width = std::min(m, c0 + kBiasColumnBlock) - c0;
    double acc[kBiasColumnBlock] = {};
    for (int64_t r = 0; r < n; ++r) {
      const float* gr = g + r * m + c0;
      for (int64_t j = 0; j < width; ++j) acc[j] += gr[j];
    }
    for (int64_t j = 0; j < width; ++j) db[c0 + j] += static_cast<float>(acc[j]);
  }
}

}  // namespace sbp::cpu
