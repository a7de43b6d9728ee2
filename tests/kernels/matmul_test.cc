#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/matmul_few_rows.h"
#include "tests/kernels/op_test_util.h"

namespace sbp {
namespace {

using op_test::Vec;

// c [n, m] = sum_k a(i, k) b(k, j) with accessors, in double.
template <typename A, typename B>
Vec NaiveProduct(int64_t n, int64_t m, int64_t k, A a, B b) {
  Vec c(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p) s += a(i, p) * b(p, j);
      c[i * m + j] = s;
    }
  }
  return c;
}

// y [n, m] = x [n, k] . w [m, k]^T in double.
Vec LinearReference(const Vec& x, const Vec& w, int64_t n, int64_t m, int64_t k) {
  return NaiveProduct(
      n, m, k, [&](int64_t i, int64_t p) { return x[i * k + p]; },
      [&](int64_t p, int64_t j) { return w[j * k + p]; });
}

class MatmulTest : public ::testing::TestWithParam<bool> {};  // the accumulate flag

TEST_P(MatmulTest, XWtMatchesNaive) {
  const bool accumulate = GetParam();
  const int64_t n = 7, m = 5, k = 9;
  Tensor x = op_test::RandomTensor({n, k}, 1);
  Tensor w = op_test::RandomTensor({m, k}, 2);
  Tensor y = op_test::RandomTensor({n, m}, 3);
  Vec want = LinearReference(op_test::ToDouble(x), op_test::ToDouble(w), n, m, k);
  if (accumulate) {
    want = op_test::AddVec(want, op_test::ToDouble(y));
  } else {
    op_test::FillWith(y, std::numeric_limits<float>::quiet_NaN());  // must be overwritten, not read
  }
  cpu::MatmulXWt(x, w, y, accumulate);
  EXPECT_LT(op_test::RelErr(y, want), op_test::kForwardTol);
}

TEST_P(MatmulTest, DyWMatchesNaive) {
  const bool accumulate = GetParam();
  const int64_t n = 6, m = 4, k = 11;
  Tensor dy = op_test::RandomTensor({2, 3, m}, 4);  // leading dims flatten to n rows
  Tensor w = op_test::RandomTensor({m, k}, 5);
  Tensor dx = op_test::RandomTensor({2, 3, k}, 6);
  const Vec g = op_test::ToDouble(dy), wd = op_test::ToDouble(w);
  Vec want = NaiveProduct(
      n, k, m, [&](int64_t i, int64_t p) { return g[i * m + p]; },
      [&](int64_t p, int64_t j) { return wd[p * k + j]; });
  if (accumulate) {
    want = op_test::AddVec(want, op_test::ToDouble(dx));
  } else {
    op_test::FillWith(dx, std::numeric_limits<float>::quiet_NaN());
  }
  cpu::MatmulDyW(dy, w, dx, accumulate);
  EXPECT_LT(op_test::RelErr(dx, want), op_test::kForwardTol);
}

INSTANTIATE_TEST_SUITE_P(Accumulate, MatmulTest, ::testing::Bool());

TEST(Matmul, AccumDyTXMatchesNaiveAndAdds) {
  const int64_t n = 8, m = 3, k = 10;
  Tensor dy = op_test::RandomTensor({n, m}, 7);
  Tensor x = op_test::RandomTensor({n, k}, 8);
  Tensor dw = op_test::RandomTensor({m, k}, 9);
  const Vec g = op_test::ToDouble(dy), xd = op_test::ToDouble(x);
  const Vec want = op_test::AddVec(op_test::ToDouble(dw),
                                   NaiveProduct(
                                       m, k, n, [&](int64_t i, int64_t p) { return g[p * m + i]; },
                                       [&](int64_t p, int64_t j) { return xd[p * k + j]; }));
  cpu::MatmulAccumDyTX(dy, x, dw);
  EXPECT_LT(op_test::RelErr(dw, want), op_test::kForwardTol);
}

TEST(Matmul, BackwardsMatchFiniteDifferences) {
  const int64_t n = 4, m = 3, k = 5;
  Tensor x = op_test::RandomTensor({n, k}, 10);
  Tensor w = op_test::RandomTensor({m, k}, 11);
  Tensor b = op_test::RandomTensor({m}, 12);
  Tensor dy = op_test::RandomTensor({n, m}, 13);
  const Vec xd = op_test::ToDouble(x), wd = op_test::ToDouble(w), bd = op_test::ToDouble(b);
  const Vec r = op_test::ToDouble(dy);
  // L = sum r * (x w^T + b).
  auto loss = [&](const Vec& xv, const Vec& wv, const Vec& bv) {
    Vec y = LinearReference(xv, wv, n, m, k);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < m; ++j) y[i * m + j] += bv[j];
    }
    return op_test::Dot(y, r);
  };
  const Vec numeric_x = op_test::NumericGradient([&](const Vec& v) { return loss(v, wd, bd); }, xd);
  const Vec numeric_w = op_test::NumericGradient([&](const Vec& v) { return loss(xd, v, bd); }, wd);
  const Vec numeric_b = op_test::NumericGradient([&](const Vec& v) { return loss(xd, wd, v); }, bd);

  Tensor dx = op_test::NewTensor({n, k});
  cpu::MatmulDyW(dy, w, dx, /*accumulate=*/false);
  EXPECT_LT(op_test::RelErr(dx, numeric_x), op_test::kGradTol);

  Tensor dw = op_test::RandomTensor({m, k}, 14);
  const Vec dw_before = op_test::ToDouble(dw);
  cpu::MatmulAccumDyTX(dy, x, dw);
  EXPECT_LT(op_test::RelErr(op_test::Sub(op_test::ToDouble(dw), dw_before), numeric_w),
            op_test::kGradTol);

  Tensor db = op_test::RandomTensor({m}, 15);
  const Vec db_before = op_test::ToDouble(db);
  cpu::BiasBackward(dy, db);
  EXPECT_LT(op_test::RelErr(op_test::Sub(op_test::ToDouble(db), db_before), numeric_b),
            op_test::kGradTol);
}

TEST(Matmul, AddBiasAddsToEveryRow) {
  const int64_t n = 5, m = 7;
  Tensor y = op_test::RandomTensor({n, m}, 16);
  Tensor b = op_test::RandomTensor({m}, 17);
  Vec want = op_test::ToDouble(y);
  const Vec bd = op_test::ToDouble(b);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) want[i * m + j] += bd[j];
  }
  cpu::AddBias(y, b);
  EXPECT_LT(op_test::RelErr(y, want), 1e-7);
}

TEST(Matmul, LargeBiasBackwardIsAccurateAndIndependentOfThreadCount) {
  const int64_t n = 2000, m = 200;  // parallel path, a partial last column block
  Tensor dy = op_test::RandomTensor({n, m}, 18);
  const Vec g = op_test::ToDouble(dy);
  Vec want(static_cast<size_t>(m), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) want[j] += g[i * m + j];
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  Tensor one = op_test::NewTensor({m});
  cpu::BiasBackward(dy, one);
  omp_set_num_threads(2);
  Tensor two = op_test::NewTensor({m});
  cpu::BiasBackward(dy, two);
  omp_set_num_threads(saved);
  EXPECT_TRUE(op_test::BitwiseEqual(one, two));
  EXPECT_LT(op_test::RelErr(two, want), 1e-7);
}

// A decode step's shape: a few rows of x against a large w take the streaming
// path (matmul_few_rows.h). Every row count it serves (remainders of the
// four-row groups), a w-row count that leaves a partial block, both
// accumulate modes, and the same bits on one thread as on two.
TEST(Matmul, FewRowsAgainstALargeWeightMatchNaiveAndIgnoreThreadCount) {
  const int64_t m = 4099, k = 67;  // m * k >= 2^18: the streaming path
  ASSERT_TRUE(cpu::UseFewRowsMatmul(1, m * k));
  ASSERT_FALSE(cpu::UseFewRowsMatmul(cpu::kFewRowsMaxRows + 1, m * k));
  ASSERT_FALSE(cpu::UseFewRowsMatmul(4, 64 * 64));
  Tensor w = op_test::RandomTensor({m, k}, 30);
  const Vec wd = op_test::ToDouble(w);
  const int saved = omp_get_max_threads();
  for (int64_t n = 1; n <= cpu::kFewRowsMaxRows; ++n) {
    for (const bool accumulate : {false, true}) {
      Tensor x = op_test::RandomTensor({n, k}, 31 + n);
      Tensor start = op_test::RandomTensor({n, m}, 50 + n);
      Vec want = LinearReference(op_test::ToDouble(x), wd, n, m, k);
      if (accumulate) want = op_test::AddVec(want, op_test::ToDouble(start));
      Tensor one = op_test::NewTensor({n, m});
      Tensor two = op_test::NewTensor({n, m});
      for (Tensor* y : {&one, &two}) {
        if (accumulate) {
          std::copy_n(start.data<float>(), n * m, y->data<float>());
        } else {
          op_test::FillWith(*y, std::numeric_limits<float>::quiet_NaN());
        }
      }
      omp_set_num_threads(1);
      cpu::MatmulXWt(x, w, one, accumulate);
      omp_set_num_threads(2);
      cpu::MatmulXWt(x, w, two, accumulate);
      omp_set_num_threads(saved);
      EXPECT_LT(op_test::RelErr(two, want), op_test::kForwardTol) << n << " rows";
      EXPECT_TRUE(op_test::BitwiseEqual(one, two)) << n << " rows";
    }
  }
}

TEST(Matmul, LargeLayoutsMatchNaive) {
  const int64_t n = 96, m = 80, k = 72;  // big enough for the blocked sgemm kernels
  Tensor x = op_test::RandomTensor({n, k}, 19);
  Tensor w = op_test::RandomTensor({m, k}, 20);
  Tensor y = op_test::NewTensor({n, m});
  cpu::MatmulXWt(x, w, y, false);
  EXPECT_LT(
      op_test::RelErr(y, LinearReference(op_test::ToDouble(x), op_test::ToDouble(w), n, m, k)),
      op_test::kForwardTol);
}

TEST(Matmul, EmptyInnerDimension) {
  Tensor x = op_test::NewTensor({3, 0});
  Tensor w = op_test::NewTensor({2, 0});
  Tensor y = op_test::RandomTensor({3, 2}, 21);
  const Vec before = op_test::ToDouble(y);
  cpu::MatmulXWt(x, w, y, /*accumulate=*/true);
  EXPECT_EQ(op_test::ToDouble(y), before);
  cpu::MatmulXWt(x, w, y, /*accumulate=*/false);
  EXPECT_EQ(op_test::ToDouble(y), Vec(6, 0.0));
  Tensor dy = op_test::NewTensor({0, 2});
  Tensor x0 = op_test::NewTensor({0, 4});
  Tensor dw = op_test::RandomTensor({2, 4}, 22);
  const Vec dw_before = op_test::ToDouble(dw);
  cpu::MatmulAccumDyTX(dy, x0, dw);  // no rows: nothing added
  EXPECT_EQ(op_test::ToDouble(dw), dw_before);
}

TEST(MatmulDeathTest, ShapeMismatchNamesShapes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor x = op_test::RandomTensor({4, 5}, 23);
  Tensor w = op_test::RandomTensor({3, 6}, 24);
  Tensor y = op_test::NewTensor({4, 3});
  EXPECT_DEATH(cpu::MatmulXWt(x, w, y, false), "f32\\[4, 3\\].*f32\\[4, 5\\].*f32\\[3, 6\\]");
}

}  // namespace
}  // namespace sbp
