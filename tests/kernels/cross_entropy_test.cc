#include "kernels/cpu/cross_entropy.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/tensor_checks.h"
#include "tests/kernels/op_test_util.h"

namespace sbp {
namespace {

using op_test::Vec;

constexpr int32_t kIgnore = -100;

// logsumexp of row r of a [n, v] matrix, in double.
double RowLse(const Vec& l, int64_t r, int64_t v) {
  double m = l[r * v];
  for (int64_t j = 1; j < v; ++j) m = std::max(m, l[r * v + j]);
  double s = 0.0;
  for (int64_t j = 0; j < v; ++j) s += std::exp(l[r * v + j] - m);
  return m + std::log(s);
}

// log softmax(l_r)[t_r] per row (0 on ignored rows), in double.
Vec LogProbsReference(const Vec& l, const std::vector<int32_t>& targets, int64_t v) {
  Vec out(targets.size(), 0.0);
  for (size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] != kIgnore) out[r] = l[r * v + targets[r]] - RowLse(l, r, v);
  }
  return out;
}

double CrossEntropyReference(const Vec& l, const std::vector<int32_t>& targets, int64_t v) {
  double loss = 0.0;
  for (double lp : LogProbsReference(l, targets, v)) loss -= lp;
  return loss;
}

// scale * (softmax - onehot) per valid row, 0 on ignored rows.
Vec CrossEntropyGradReference(const Vec& l, const std::vector<int32_t>& targets, int64_t v,
                              double scale) {
  Vec g(l.size(), 0.0);
  for (size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] == kIgnore) continue;
    const double lse = RowLse(l, r, v);
    for (int64_t j = 0; j < v; ++j) g[r * v + j] = scale * std::exp(l[r * v + j] - lse);
    g[r * v + targets[r]] -= scale;
  }
  return g;
}

std::vector<int32_t> IntsOf(const Tensor& t) {
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

TEST(CrossEntropy, FusedMatchesReferenceAndIgnoresRows) {
  const int64_t n = 6, v = 11;
  const float scale = 0.25f;
  Tensor logits = op_test::RandomTensor({n, v}, 1, 3.0f);
  Tensor targets = op_test::FromInts({n}, {3, kIgnore, 0, 10, kIgnore, 7});
  const Vec l = op_test::ToDouble(logits);
  const std::vector<int32_t> t = IntsOf(targets);
  const double loss = cpu::CrossEntropyForwardBackward(logits, targets, scale);
  EXPECT_NEAR(loss, CrossEntropyReference(l, t, v), 1e-5 * std::abs(loss));
  EXPECT_LT(op_test::RelErr(logits, CrossEntropyGradReference(l, t, v, scale)),
            op_test::kForwardTol);
  for (int64_t r : {1, 4}) {
    for (int64_t j = 0; j < v; ++j) EXPECT_EQ(logits.data<float>()[r * v + j], 0.0f);
  }
  // Valid rows of the gradient sum to zero.
  for (int64_t r : {0, 2, 3, 5}) {
    double s = 0.0;
    for (int64_t j = 0; j < v; ++j) s += logits.data<float>()[r * v + j];
    EXPECT_NEAR(s, 0.0, 1e-6);
  }
}

// Rows long enough for the vectorised blocks (16 logits each) plus a tail, with
// a wide spread of logits (many exps far below the max).
TEST(CrossEntropy, LongRowsMatchReference) {
  const int64_t n = 5, v = 4099;
  const float scale = 0.125f;
  Tensor logits = op_test::RandomTensor({n, v}, 7, 8.0f);
  Tensor targets = op_test::FromInts({n}, {4098, 0, kIgnore, 2047, 17});
  const Vec l = op_test::ToDouble(logits);
  const std::vector<int32_t> t = IntsOf(targets);

  Tensor logprobs = op_test::NewTensor({n});
  Tensor lse = op_test::NewTensor({n});
  cpu::LogProbsForward(logits, targets, logprobs, lse);
  EXPECT_LT(op_test::RelErr(logprobs, LogProbsReference(l, t, v)), 1e-6);
  for (int64_t r = 0; r < n; ++r) {
    if (t[r] == kIgnore) continue;
    EXPECT_NEAR(lse.data<float>()[r], RowLse(l, r, v), 1e-5);
  }

  Tensor grad = op_test::Clone(logits);
  const double loss = cpu::CrossEntropyForwardBackward(grad, targets, scale);
  EXPECT_NEAR(loss, CrossEntropyReference(l, t, v), 1e-6 * std::abs(loss));
  EXPECT_LT(op_test::RelErr(grad, CrossEntropyGradReference(l, t, v, scale)), 1e-6);

  // LogProbsBackward with dlogprobs = -scale is the fused gradient.
  Tensor dlogprobs = op_test::NewTensor({n});
  for (int64_t r = 0; r < n; ++r) dlogprobs.data<float>()[r] = -scale;
  cpu::LogProbsBackward(logits, targets, lse, dlogprobs);
  EXPECT_LT(op_test::RelErr(logits, CrossEntropyGradReference(l, t, v, scale)), 1e-6);
}

TEST(CrossEntropy, FusedGradientMatchesFiniteDifferences) {
  const int64_t n = 4, v = 7;
  const float scale = 0.5f;
  Tensor logits = op_test::RandomTensor({n, v}, 2, 2.0f);
  Tensor targets = op_test::FromInts({n}, {6, 2, kIgnore, 0});
  const std::vector<int32_t> t = IntsOf(targets);
  const Vec numeric =
      op_test::NumericGradient([&](const Vec& x) { return scale * CrossEntropyReference(x, t, v); },
                               op_test::ToDouble(logits));
  cpu::CrossEntropyForwardBackward(logits, targets, scale);
  EXPECT_LT(op_test::RelErr(logits, numeric), op_test::kGradTol);
}

TEST(CrossEntropy, LogProbsForwardMatchesReference) {
  const int64_t n = 5, v = 9;
  Tensor logits = op_test::RandomTensor({n, v}, 3, 2.0f);
  Tensor targets = op_test::FromInts({n}, {8, 0, kIgnore, 4, 4});
  Tensor logprobs = op_test::NewTensor({n});
  Tensor lse = op_test::NewTensor({n});
  cpu::LogProbsForward(logits, targets, logprobs, lse);
  const Vec l = op_test::ToDouble(logits);
  EXPECT_LT(op_test::RelErr(logprobs, LogProbsReference(l, IntsOf(targets), v)),
            op_test::kForwardTol);
  for (int64_t r = 0; r < n; ++r) {
    if (r == 2) {
      EXPECT_EQ(logprobs.data<float>()[r], 0.0f);
    } else {
      EXPECT_NEAR(lse.data<float>()[r], RowLse(l, r, v), 1e-5) << r;
    }
  }
}

TEST(CrossEntropy, LogProbsBackwardMatchesFiniteDifferences) {
  const int64_t n = 5, v = 6;
  Tensor logits = op_test::RandomTensor({n, v}, 4, 2.0f);
  Tensor targets = op_test::FromInts({n}, {1, kIgnore, 5, 0, 3});
  Tensor coeff = op_test::RandomTensor({n}, 5);  // random per-row dlogprobs
  const std::vector<int32_t> t = IntsOf(targets);
  const Vec c = op_test::ToDouble(coeff);
  const Vec numeric = op_test::NumericGradient(
      [&](const Vec& x) { return op_test::Dot(LogProbsReference(x, t, v), c); },
      op_test::ToDouble(logits));
  Tensor logprobs = op_test::NewTensor({n});
  Tensor lse = op_test::NewTensor({n});
  cpu::LogProbsForward(logits, targets, logprobs, lse);
  cpu::LogProbsBackward(logits, targets, lse, coeff);
  EXPECT_LT(op_test::RelErr(logits, numeric), op_test::kGradTol);
  for (int64_t j = 0; j < v; ++j) EXPECT_EQ(logits.data<float>()[1 * v + j], 0.0f);
}

TEST(CrossEntropy, FusedEqualsNegatedLogProbs) {
  const int64_t n = 96, v = 512;  // parallel path
  const float scale = 1.0f / 80.0f;
  Tensor logits = op_test::RandomTensor({n, v}, 6, 4.0f);
  Tensor targets = op_test::RandomInts({n}, 7, 0, v);
  for (int64_t r = 0; r < n; r += 7) targets.data<int32_t>()[r] = kIgnore;

  Tensor fused = op_test::Clone(logits);
  const double loss = cpu::CrossEntropyForwardBackward(fused, targets, scale);

  Tensor logprobs = op_test::NewTensor({n});
  Tensor lse = op_test::NewTensor({n});
  cpu::LogProbsForward(logits, targets, logprobs, lse);
  double sum = 0.0;
  for (double lp : op_test::ToDouble(logprobs)) sum -= lp;
  EXPECT_NEAR(loss, sum, 1e-6 * std::abs(loss));
  EXPECT_NEAR(loss, CrossEntropyReference(op_test::ToDouble(logits), IntsOf(targets), v),
              1e-7 * std::abs(loss));

  Tensor coeff = op_test::NewTensor({n});
  op_test::FillWith(coeff, -scale);
  Tensor grad = op_test::Clone(logits);
  cpu::LogProbsBackward(grad, targets, lse, coeff);
  EXPECT_LT(op_test::RelErr(grad, op_test::ToDouble(fused)), 1e-5);
  EXPECT_LT(op_test::RelErr(fused, CrossEntropyGradReference(op_test::ToDouble(logits),
                                                             IntsOf(targets), v, scale)),
            op_test::kForwardTol);
}

TEST(CrossEntropy, ResultsIndependentOfThreadCount) {
  const int64_t n = 64, v = 1000;
  Tensor logits = op_test::RandomTensor({n, v}, 8, 3.0f);
  Tensor targets = op_test::RandomInts({n}, 9, 0, v);
  const int saved = omp_get_max_threads();
  double losses[2];
  Tensor grads[2];
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    grads[threads - 1] = op_test::Clone(logits);
    losses[threads - 1] = cpu::CrossEntropyForwardBackward(grads[threads - 1], targets, 1.0f);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_TRUE(op_test::BitwiseEqual(grads[0], grads[1]));
}

TEST(CrossEntropy, ExtremeLogitsGiveFiniteLossAndGradient) {
  const int64_t n = 3, v = 5;
  // Row 0: target at the max; row 1: target at the min; row 2: all huge and equal.
  Tensor logits = op_test::FromValues({n, v}, {1e4f, -1e4f, 0.0f, 5e3f, -5e3f,  //
                                               1e4f, -1e4f, 1e4f, -1e4f, 0.0f,  //
                                               1e4f, 1e4f, 1e4f, 1e4f, 1e4f});
  Tensor targets = op_test::FromInts({n}, {0, 1, 2});
  const Vec l = op_test::ToDouble(logits);
  const std::vector<int32_t> t = IntsOf(targets);

  Tensor logprobs = op_test::NewTensor({n});
  Tensor lse = op_test::NewTensor({n});
  cpu::LogProbsForward(logits, targets, logprobs, lse);
  Tensor lp_grad = op_test::Clone(logits);
  Tensor coeff = op_test::FromValues({n}, {1.0f, -2.0f, 0.5f});
  cpu::LogProbsBackward(lp_grad, targets, lse, coeff);

  Tensor fused = op_test::Clone(logits);
  const double loss = cpu::CrossEntropyForwardBackward(fused, targets, 1.0f);
  EXPECT_TRUE(std::isfinite(loss));
  const double want = CrossEntropyReference(l, t, v);  // 0 + (2e4 + log 2) + log 5
  EXPECT_NEAR(loss, want, 1e-6 * want);
  EXPECT_NEAR(logprobs.data<float>()[0], 0.0, 1e-6);
  EXPECT_NEAR(logprobs.data<float>()[1], -(2e4 + std::log(2.0)), 1e-2);
  EXPECT_NEAR(logprobs.data<float>()[2], -std::log(5.0), 1e-6);
  for (const Tensor* g : {&fused, &lp_grad, &logprobs, &lse}) {
    EXPECT_TRUE(CheckFinite(*g, "extreme").ok()) << CheckFinite(*g, "extreme");
  }
  EXPECT_LT(op_test::RelErr(fused, CrossEntropyGradReference(l, t, v, 1.0)), 1e-6);
  // Row 1: softmax is (0.5, 0, 0.5, 0, 0), target 1: coefficient -2 gives 2 * (p - onehot).
  const float* g = lp_grad.data<float>() + v;
  EXPECT_NEAR(g[0], 1.0, 1e-3);
  EXPECT_NEAR(g[1], -2.0, 1e-6);
  EXPECT_NEAR(g[2], 1.0, 1e-3);
}

TEST(CrossEntropyDeathTest, OutOfRangeTargetIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor logits = op_test::RandomTensor({2, 10}, 10);
  Tensor targets = op_test::FromInts({2}, {3, 11});
  EXPECT_DEATH(cpu::CrossEntropyForwardBackward(logits, targets, 1.0f),
               "target 11 of row 1 .*vocabulary of size 10");
  Tensor negative = op_test::FromInts({2}, {-1, 0});
  Tensor logprobs = op_test::NewTensor({2});
  Tensor lse = op_test::NewTensor({2});
  EXPECT_DEATH(cpu::LogProbsForward(logits, negative, logprobs, lse), "target -1 of row 0");
}

}  // namespace
}  // namespace sbp
