#include "kernels/cpu/rms_norm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "tests/kernels/op_test_util.h"

namespace sbp {
namespace {

using op_test::Vec;

constexpr float kEps = 1e-6f;

// y = x * rstd * w per row of length d, in double; rstd returned through `rstd`.
Vec RmsNormReference(const Vec& x, const Vec& w, double eps, Vec* rstd = nullptr) {
  const size_t d = w.size();
  Vec y(x.size());
  if (rstd != nullptr) rstd->clear();
  for (size_t r = 0; r * d < x.size(); ++r) {
    double sum = 0.0;
    for (size_t j = 0; j < d; ++j) sum += x[r * d + j] * x[r * d + j];
    const double s = 1.0 / std::sqrt(sum / static_cast<double>(d) + eps);
    if (rstd != nullptr) rstd->push_back(s);
    for (size_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] * s * w[j];
  }
  return y;
}

TEST(RmsNorm, ForwardMatchesReferencePerHead) {
  // Qwen3 q_norm layout: x [T, H, d], weight [d].
  Tensor x = op_test::RandomTensor({3, 4, 8}, 1, 2.0f);
  Tensor w = op_test::RandomTensor({8}, 2);
  Tensor y = op_test::NewTensor({3, 4, 8});
  Tensor rstd = op_test::NewTensor({3, 4});
  cpu::RmsNormForward(x, w, kEps, y, &rstd);
  Vec want_rstd;
  const Vec want = RmsNormReference(op_test::ToDouble(x), op_test::ToDouble(w), kEps, &want_rstd);
  EXPECT_LT(op_test::RelErr(y, want), op_test::kForwardTol);
  EXPECT_LT(op_test::RelErr(rstd, want_rstd), op_test::kForwardTol);
}

TEST(RmsNorm, ForwardInPlaceWithoutRstd) {
  Tensor x = op_test::RandomTensor({5, 16}, 3);
  Tensor w = op_test::RandomTensor({16}, 4);
  const Vec want = RmsNormReference(op_test::ToDouble(x), op_test::ToDouble(w), kEps);
  cpu::RmsNormForward(x, w, kEps, x, nullptr);  // y aliases x
  EXPECT_LT(op_test::RelErr(x, want), op_test::kForwardTol);
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 6, d = 8;
  Tensor x = op_test::RandomTensor({2, 3, d}, 5);
  Tensor w = op_test::RandomTensor({d}, 6);
  Tensor dy = op_test::RandomTensor({2, 3, d}, 7);
  const Vec xd = op_test::ToDouble(x), wd = op_test::ToDouble(w), r = op_test::ToDouble(dy);
  const Vec numeric_x = op_test::NumericGradient(
      [&](const Vec& v) { return op_test::Dot(RmsNormReference(v, wd, kEps), r); }, xd);
  const Vec numeric_w = op_test::NumericGradient(
      [&](const Vec& v) { return op_test::Dot(RmsNormReference(xd, v, kEps), r); }, wd);

  Tensor y = op_test::NewTensor(x.shape());
  Tensor rstd = op_test::NewTensor({rows});
  cpu::RmsNormForward(x, w, kEps, y, &rstd);
  Tensor dx = op_test::NewTensor(x.shape());
  Tensor dweight = op_test::RandomTensor({d}, 8);  // += onto existing contents
  const Vec before = op_test::ToDouble(dweight);
  cpu::RmsNormBackward(x, w, rstd, dy, dx, dweight);
  EXPECT_LT(op_test::RelErr(dx, numeric_x), op_test::kGradTol);
  EXPECT_LT(op_test::RelErr(op_test::Sub(op_test::ToDouble(dweight), before), numeric_w),
            op_test::kGradTol);

  // dx may alias dy: same result.
  Tensor dy_inplace = op_test::Clone(dy);
  Tensor dweight2 = op_test::NewTensor({d});
  cpu::RmsNormBackward(x, w, rstd, dy_inplace, dy_inplace, dweight2);
  EXPECT_TRUE(op_test::BitwiseEqual(dy_inplace, dx));
}

TEST(RmsNorm, LargeIsAccurateAndIndependentOfThreadCount) {
  const int64_t rows = 1500, d = 96;  // parallel path, several row blocks
  Tensor x = op_test::RandomTensor({rows, d}, 9, 3.0f);
  Tensor w = op_test::RandomTensor({d}, 10);
  Tensor dy = op_test::RandomTensor({rows, d}, 11);
  const Vec xd = op_test::ToDouble(x), wd = op_test::ToDouble(w), g = op_test::ToDouble(dy);

  // Reference gradients in double.
  Vec rstd_ref;
  RmsNormReference(xd, wd, kEps, &rstd_ref);
  Vec dx_ref(xd.size()), dw_ref(static_cast<size_t>(d), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      const double n = xd[r * d + j] * rstd_ref[r];
      dot += wd[j] * g[r * d + j] * n;
      dw_ref[j] += g[r * d + j] * n;
    }
    for (int64_t j = 0; j < d; ++j) {
      const double n = xd[r * d + j] * rstd_ref[r];
      dx_ref[r * d + j] = rstd_ref[r] * (wd[j] * g[r * d + j] - n * dot / static_cast<double>(d));
    }
  }

  const int saved = omp_get_max_threads();
  Tensor results[2][3];
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    Tensor y = op_test::NewTensor({rows, d});
    Tensor rstd = op_test::NewTensor({rows});
    Tensor dx = op_test::NewTensor({rows, d});
    Tensor dweight = op_test::NewTensor({d});
    cpu::RmsNormForward(x, w, kEps, y, &rstd);
    cpu::RmsNormBackward(x, w, rstd, dy, dx, dweight);
    results[threads - 1][0] = y;
    results[threads - 1][1] = dx;
    results[threads - 1][2] = dweight;
  }
  omp_set_num_threads(saved);
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(op_test::BitwiseEqual(results[0][k], results[1][k]));
  EXPECT_LT(op_test::RelErr(results[1][0], RmsNormReference(xd, wd, kEps)), op_test::kForwardTol);
  EXPECT_LT(op_test::RelErr(results[1][1], dx_ref), op_test::kForwardTol);
  EXPECT_LT(op_test::RelErr(results[1][2], dw_ref), op_test::kForwardTol);
}

TEST(RmsNormDeathTest, WrongLastDimNamesShapes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor x = op_test::RandomTensor({4, 6}, 12);
  Tensor w = op_test::RandomTensor({8}, 13);
  Tensor y = op_test::NewTensor({4, 6});
  EXPECT_DEATH(cpu::RmsNormForward(x, w, kEps, y, nullptr), "f32\\[4, 6\\].*f32\\[8\\]");
}

}  // namespace
}  // namespace sbp
