#include "kernels/cpu/elementwise.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "tests/kernels/op_test_util.h"

namespace sbp {
namespace {

using op_test::Vec;

double SumSquaresReference(const Vec& x) {
  double s = 0.0;
  for (double v : x) s += v * v;
  return s;
}

TEST(SumSquares, SmallMatchesReference) {
  Tensor x = op_test::FromValues({5}, {1.0f, -2.0f, 3.0f, 0.5f, -0.25f});
  EXPECT_EQ(cpu::SumSquares(x), 1.0 + 4.0 + 9.0 + 0.25 + 0.0625);
  Tensor empty = op_test::NewTensor({0});
  EXPECT_EQ(cpu::SumSquares(empty), 0.0);
}

TEST(SumSquares, LargeIsAccurateAndIndependentOfThreadCount) {
  Tensor x = op_test::RandomTensor({(1 << 20) + 37}, 1);  // many blocks, a ragged tail
  const double want = SumSquaresReference(op_test::ToDouble(x));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = cpu::SumSquares(x);
  omp_set_num_threads(2);
  const double two = cpu::SumSquares(x);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
  EXPECT_NEAR(two, want, 1e-12 * want);
}

TEST(SumSquares, Bf16) {
  Tensor x = op_test::RandomTensor({1000}, 2, 1.0f, DType::kBF16);
  const double want = SumSquaresReference(op_test::ToDouble(x));
  EXPECT_NEAR(cpu::SumSquares(x), want, 1e-12 * want);
}

TEST(Elementwise, AddAxpyScale) {
  const Shape shape = {70, 1000};  // parallel path
  Tensor a = op_test::RandomTensor(shape, 3);
  Tensor b = op_test::RandomTensor(shape, 4);
  const Vec ad = op_test::ToDouble(a), bd = op_test::ToDouble(b);

  Tensor out = op_test::NewTensor(shape);
  cpu::Add(a, b, out);
  EXPECT_LT(op_test::RelErr(out, op_test::AddVec(ad, bd)), 1e-7);
  Tensor a2 = op_test::Clone(a);
  cpu::Add(a2, b, a2);  // out aliases a
  EXPECT_TRUE(op_test::BitwiseEqual(a2, out));
  Tensor b2 = op_test::Clone(b);
  cpu::Add(a, b2, b2);  // out aliases b
  EXPECT_TRUE(op_test::BitwiseEqual(b2, out));

  Tensor y = op_test::Clone(b);
  cpu::Axpy(-0.75f, a, y);
  Vec want(ad.size());
  for (size_t i = 0; i < ad.size(); ++i) want[i] = bd[i] - 0.75 * ad[i];
  EXPECT_LT(op_test::RelErr(y, want), 1e-7);

  Tensor s = op_test::Clone(a);
  cpu::Scale(s, 0.5f);
  for (size_t i = 0; i < ad.size(); ++i) want[i] = 0.5 * ad[i];
  EXPECT_EQ(op_test::ToDouble(s), want);  // exact: a power of two
}

TEST(Elementwise, FillEveryDtype) {
  Tensor f = op_test::NewTensor({3, 4});
  cpu::Fill(f, 1.5f);
  EXPECT_EQ(op_test::ToDouble(f), Vec(12, 1.5));

  Tensor h = op_test::NewTensor({5}, DType::kBF16);
  cpu::Fill(h, 1.0f / 3.0f);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(h.data<bf16_t>()[i], FloatToBf16(1.0f / 3.0f));

  Tensor ids = op_test::NewTensor({4}, DType::kI32);
  cpu::Fill(ids, -100.0f);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(ids.data<int32_t>()[i], -100);
}

TEST(Cast, Bf16RoundTrip) {
  const Shape shape = {64, 1024};  // parallel path
  Tensor x = op_test::RandomTensor(shape, 5, 10.0f);
  float* xs = x.data<float>();
  xs[0] = 1.0f + 1.0f / 256.0f;  // halfway between bf16 1 and 1+2^-7: to even (1)
  xs[1] = 1.0f + 3.0f / 256.0f;  // halfway: to even (1 + 2^-6)
  xs[2] = std::numeric_limits<float>::quiet_NaN();
  xs[3] = -std::numeric_limits<float>::infinity();
  xs[4] = 0.0f;

  Tensor h = op_test::NewTensor(shape, DType::kBF16);
  cpu::Cast(x, h);
  Tensor back = op_test::NewTensor(shape);
  cpu::Cast(h, back);
  const float* bs = back.data<float>();
  EXPECT_EQ(bs[0], 1.0f);
  EXPECT_EQ(bs[1], 1.0f + 1.0f / 64.0f);
  EXPECT_TRUE(std::isnan(bs[2]));
  EXPECT_EQ(bs[3], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(bs[4], 0.0f);
  for (int64_t i = 5; i < x.numel(); ++i) {
    ASSERT_LE(std::abs(bs[i] - xs[i]), std::abs(xs[i]) * (1.0f / 256.0f)) << i;  // 2^-8 rel
  }
  // bf16 -> f32 -> bf16 is exact.
  Tensor h2 = op_test::NewTensor(shape, DType::kBF16);
  cpu::Cast(back, h2);
  EXPECT_TRUE(op_test::BitwiseEqual(h, h2));
}

TEST(Cast, EqualDtypesCopy) {
  Tensor x = op_test::RandomTensor({3, 5}, 6);
  Tensor y = op_test::NewTensor({3, 5});
  cpu::Cast(x, y);
  EXPECT_TRUE(op_test::BitwiseEqual(x, y));
  Tensor ids = op_test::RandomInts({7}, 7, -5, 5);
  Tensor ids2 = op_test::NewTensor({7}, DType::kI32);
  cpu::Cast(ids, ids2);
  EXPECT_TRUE(op_test::BitwiseEqual(ids, ids2));
}

TEST(ElementwiseDeathTest, BadArgumentsAreNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor a = op_test::NewTensor({2, 3});
  Tensor b = op_test::NewTensor({3, 2});
  EXPECT_DEATH(cpu::Add(a, b, a), "b f32\\[3, 2\\].*a f32\\[2, 3\\]");
  Tensor ids = op_test::NewTensor({2, 3}, DType::kI32);
  EXPECT_DEATH(cpu::Fill(ids, 0.5f), "0.5: not an int32");
  EXPECT_DEATH(cpu::Cast(a, ids), "only f32 <-> bf16");
}

}  // namespace
}  // namespace sbp
