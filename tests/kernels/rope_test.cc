#include "kernels/cpu/rope.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/op_test_util.h"

namespace sbp {
namespace {

using op_test::Vec;

// HF rotate_half rope of x [T, H, d] in double with the table's inverse
// frequencies and cos/sin scaling; sign = -1 applies the transposed map.
Vec RopeReference(const Vec& x, int64_t heads, const RopeTable& table, int64_t offset,
                  double sign = 1.0) {
  Vec y(x.size());
  const int64_t d = table.head_dim();
  const int64_t half = d / 2;
  const int64_t rows = static_cast<int64_t>(x.size()) / (heads * d);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = (t * heads + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(offset + t) * table.inv_freq[i];
        const double c = table.attention_scaling * std::cos(angle);
        const double s = sign * table.attention_scaling * std::sin(angle);
        const double a = x[base + i], b = x[base + half + i];
        y[base + i] = a * c - b * s;
        y[base + half + i] = b * c + a * s;
      }
    }
  }
  return y;
}

Vec RopeReference(const Vec& x, int64_t heads, int64_t d, int64_t offset, double theta,
                  double sign = 1.0) {
  return RopeReference(x, heads, PlainRopeTable(d, theta), offset, sign);
}

// A table as scaling makes one: frequencies that are no power law, and a
// cos/sin scaling (YaRN's 0.1 ln 4 + 1).
RopeTable ScaledTable(int64_t d) {
  RopeTable table = PlainRopeTable(d, 10000.0);
  for (size_t i = 0; i < table.inv_freq.size(); ++i) table.inv_freq[i] /= 1.0 + 0.75 * i;
  table.attention_scaling = 1.1386294361119891;
  return table;
}

TEST(Rope, HandCheckedTinyCase) {
  // d = 4, theta = 100: inv_freq = [1, 0.1]; position 1 gives angles [1, 0.1].
  // x1 = [1, 2], x2 = [3, 4]:
  //   x1' = [1 cos 1 - 3 sin 1, 2 cos 0.1 - 4 sin 0.1] = [-1.98411065, 1.59067466]
  //   x2' = [3 cos 1 + 1 sin 1, 4 cos 0.1 + 2 sin 0.1] = [ 2.46237790, 4.17968349]
  Tensor x = op_test::FromValues({1, 1, 4}, {1, 2, 3, 4});
  cpu::RopeForward(x, /*position_offset=*/1, PlainRopeTable(4, /*theta=*/100.0));
  const float* y = x.data<float>();
  EXPECT_NEAR(y[0], -1.98411065, 1e-6);
  EXPECT_NEAR(y[1], 1.59067466, 1e-6);
  EXPECT_NEAR(y[2], 2.46237790, 1e-6);
  EXPECT_NEAR(y[3], 4.17968349, 1e-6);

  // Position 0 is the identity.
  Tensor z = op_test::FromValues({1, 1, 4}, {1, 2, 3, 4});
  cpu::RopeForward(z, 0, PlainRopeTable(4, 100.0));
  EXPECT_EQ(op_test::ToDouble(z), (Vec{1, 2, 3, 4}));
}

TEST(Rope, ForwardMatchesReference) {
  const int64_t rows = 5, heads = 3, d = 8, offset = 7;
  const double theta = 10000.0;
  Tensor x = op_test::RandomTensor({rows, heads, d}, 1);
  const Vec want = RopeReference(op_test::ToDouble(x), heads, d, offset, theta);
  cpu::RopeForward(x, offset, PlainRopeTable(d, theta));
  EXPECT_LT(op_test::RelErr(x, want), op_test::kForwardTol);
}

TEST(Rope, LargePositionsMatchReference) {
  // Angles up to ~1e6 rad: computed in double, still accurate in fp32 output.
  const int64_t rows = 64, heads = 4, d = 128, offset = 1000000;
  const double theta = 1000000.0;
  Tensor x = op_test::RandomTensor({rows, heads, d}, 2);
  const Vec want = RopeReference(op_test::ToDouble(x), heads, d, offset, theta);
  cpu::RopeForward(x, offset, PlainRopeTable(d, theta));
  EXPECT_LT(op_test::RelErr(x, want), op_test::kForwardTol);
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, heads = 2, d = 6, offset = 2;
  const double theta = 500.0;
  Tensor x = op_test::RandomTensor({rows, heads, d}, 3);
  Tensor dy = op_test::RandomTensor({rows, heads, d}, 4);
  const Vec r = op_test::ToDouble(dy);
  const Vec numeric = op_test::NumericGradient(
      [&](const Vec& v) { return op_test::Dot(RopeReference(v, heads, d, offset, theta), r); },
      op_test::ToDouble(x));
  cpu::RopeBackward(dy, offset, PlainRopeTable(d, theta));
  EXPECT_LT(op_test::RelErr(dy, numeric), op_test::kGradTol);
  EXPECT_LT(op_test::RelErr(dy, RopeReference(r, heads, d, offset, theta, -1.0)),
            op_test::kForwardTol);
}

TEST(Rope, ForwardThenBackwardIsIdentity) {
  Tensor x = op_test::RandomTensor({40, 4, 64}, 5);
  const Vec original = op_test::ToDouble(x);
  cpu::RopeForward(x, 123, PlainRopeTable(64, 10000.0));
  EXPECT_GT(op_test::RelErr(x, original), 0.1);  // it did rotate
  cpu::RopeBackward(x, 123, PlainRopeTable(64, 10000.0));
  EXPECT_LT(op_test::RelErr(x, original), 1e-6);
}

TEST(Rope, ChunkWithOffsetEqualsRowsOfWholeSequence) {
  const int64_t rows = 300, heads = 2, d = 32;  // the whole sequence takes the parallel path
  Tensor whole = op_test::RandomTensor({rows, heads, d}, 6);
  Tensor chunked = op_test::Clone(whole);
  const RopeTable table = ScaledTable(d);
  cpu::RopeForward(whole, 0, table);
  for (auto [s, e] : {std::pair<int64_t, int64_t>{0, 5}, {5, 123}, {123, 300}}) {
    Tensor chunk = chunked.Rows(s, e);
    cpu::RopeForward(chunk, s, table);
  }
  EXPECT_TRUE(op_test::BitwiseEqual(whole, chunked));

  Tensor grad_whole = op_test::RandomTensor({rows, heads, d}, 7);
  Tensor grad_chunked = op_test::Clone(grad_whole);
  cpu::RopeBackward(grad_whole, 0, table);
  for (auto [s, e] : {std::pair<int64_t, int64_t>{0, 100}, {100, 300}}) {
    Tensor chunk = grad_chunked.Rows(s, e);
    cpu::RopeBackward(chunk, s, table);
  }
  EXPECT_TRUE(op_test::BitwiseEqual(grad_whole, grad_chunked));
}

TEST(Rope, ScaledTableMatchesReference) {
  const int64_t rows = 9, heads = 3, d = 16, offset = 40;
  const RopeTable table = ScaledTable(d);
  Tensor x = op_test::RandomTensor({rows, heads, d}, 9);
  const Vec want = RopeReference(op_test::ToDouble(x), heads, table, offset);
  cpu::RopeForward(x, offset, table);
  EXPECT_LT(op_test::RelErr(x, want), op_test::kForwardTol);
}

TEST(Rope, ScaledBackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, heads = 2, d = 8, offset = 5;
  const RopeTable table = ScaledTable(d);
  Tensor x = op_test::RandomTensor({rows, heads, d}, 10);
  Tensor dy = op_test::RandomTensor({rows, heads, d}, 11);
  const Vec r = op_test::ToDouble(dy);
  const Vec numeric = op_test::NumericGradient(
      [&](const Vec& v) { return op_test::Dot(RopeReference(v, heads, table, offset), r); },
      op_test::ToDouble(x));
  cpu::RopeBackward(dy, offset, table);
  EXPECT_LT(op_test::RelErr(dy, numeric), op_test::kGradTol);
}

TEST(Rope, ScalingMultipliesTheRotation) {
  // Forward then backward is the identity times attention_scaling^2.
  RopeTable table = ScaledTable(32);
  Tensor x = op_test::RandomTensor({7, 2, 32}, 12);
  Vec want = op_test::ToDouble(x);
  for (double& v : want) v *= table.attention_scaling * table.attention_scaling;
  cpu::RopeForward(x, 11, table);
  cpu::RopeBackward(x, 11, table);
  EXPECT_LT(op_test::RelErr(x, want), 1e-6);
}

TEST(RopeDeathTest, OddHeadDimNamesShape) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor x = op_test::RandomTensor({2, 2, 5}, 8);
  EXPECT_DEATH(cpu::RopeForward(x, 0, PlainRopeTable(4, 10000.0)), "head_dim.*f32\\[2, 2, 5\\]");
}

TEST(RopeDeathTest, TableOfAnotherHeadDimNamesBoth) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor x = op_test::RandomTensor({2, 2, 8}, 8);
  EXPECT_DEATH(cpu::RopeForward(x, 0, PlainRopeTable(16, 10000.0)),
               "f32\\[2, 2, 8\\].*rope table of head_dim 16");
}

}  // namespace
}  // namespace sbp
