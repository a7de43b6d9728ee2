#include "kernels/cpu/adamw.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/op_test_util.h"

namespace sbp {
namespace {

using op_test::Vec;

// One step of torch.optim.AdamW in double precision.
void AdamWReference(Vec& p, const Vec& grad, Vec& m, Vec& v, const AdamWParams& a) {
  const double lr = a.lr, b1 = a.beta1, b2 = a.beta2, eps = a.eps, wd = a.weight_decay;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(a.step));
  for (size_t i = 0; i < p.size(); ++i) {
    const double g = static_cast<double>(a.grad_scale) * grad[i];
    p[i] -= lr * wd * p[i];
    m[i] = b1 * m[i] + (1.0 - b1) * g;
    v[i] = b2 * v[i] + (1.0 - b2) * g * g;
    const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
    p[i] -= (lr / bc1) * m[i] / denom;
  }
}

TEST(AdamW, HandCheckedFirstStep) {
  // m = v = 0, p = 1, g = grad_scale * 4 = 2, lr = 0.01, wd = 0.1, step 1:
  // m = 0.2, v = 0.004, m_hat = 2, sqrt(v_hat) = 2, so
  // p = 1 - 0.01 * 0.1 * 1 - 0.01 * 2 / (2 + 1e-8) = 0.989 (+ 1e-10).
  Tensor p = op_test::FromValues({1}, {1.0f});
  Tensor g = op_test::FromValues({1}, {4.0f});
  Tensor m = op_test::NewTensor({1});
  Tensor v = op_test::NewTensor({1});
  AdamWParams a;
  a.lr = 0.01;
  a.weight_decay = 0.1;
  a.grad_scale = 0.5f;
  a.step = 1;
  cpu::AdamW(p, g, m, v, a);
  EXPECT_NEAR(p.data<float>()[0], 0.989, 1e-7);
  EXPECT_NEAR(m.data<float>()[0], 0.2, 1e-7);
  // (1 - beta2) is formed in double, as PyTorch does, then meets fp32 data.
  EXPECT_NEAR(v.data<float>()[0], 0.004, 1e-9);
}

TEST(AdamW, SeveralStepsMatchPyTorchFormulaInDouble) {
  const Shape shape = {300, 200};  // parallel path
  Tensor p = op_test::RandomTensor(shape, 1);
  Tensor m = op_test::NewTensor(shape);
  Tensor v = op_test::NewTensor(shape);
  Vec pd = op_test::ToDouble(p), md(pd.size(), 0.0), vd(pd.size(), 0.0);
  AdamWParams a;
  a.lr = 3e-3;
  a.beta1 = 0.9;
  a.beta2 = 0.95;
  a.eps = 1e-6;
  a.weight_decay = 0.1;
  for (int64_t step = 1; step <= 6; ++step) {
    a.step = step;
    a.grad_scale = 1.0f / static_cast<float>(step);  // e.g. clipping coefficients
    Tensor g = op_test::RandomTensor(shape, 100 + step, 0.1f * static_cast<float>(step));
    cpu::AdamW(p, g, m, v, a);
    AdamWReference(pd, op_test::ToDouble(g), md, vd, a);
    EXPECT_LT(op_test::RelErr(p, pd), 1e-6) << "step " << step;
    EXPECT_LT(op_test::RelErr(m, md), 1e-5) << "step " << step;
    EXPECT_LT(op_test::RelErr(v, vd), 1e-5) << "step " << step;
  }
  // The change of the parameters is accurate too, not only the parameters.
  Tensor p0 = op_test::RandomTensor(shape, 1);
  const Vec moved = op_test::Sub(op_test::ToDouble(p), op_test::ToDouble(p0));
  EXPECT_LT(op_test::RelErr(moved, op_test::Sub(pd, op_test::ToDouble(p0))), 1e-4);
}

TEST(AdamW, ZeroGradientOnlyDecays) {
  Tensor p = op_test::FromValues({3}, {1.0f, -2.0f, 0.5f});
  Tensor g = op_test::NewTensor({3});
  Tensor m = op_test::NewTensor({3});
  Tensor v = op_test::NewTensor({3});
  AdamWParams a;
  a.lr = 0.1;
  a.weight_decay = 0.5f;
  cpu::AdamW(p, g, m, v, a);
  EXPECT_FLOAT_EQ(p.data<float>()[0], 0.95f);
  EXPECT_FLOAT_EQ(p.data<float>()[1], -1.9f);
  EXPECT_FLOAT_EQ(p.data<float>()[2], 0.475f);
}

TEST(AdamWDeathTest, MismatchedStateNamesShapes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor p = op_test::NewTensor({4});
  Tensor g = op_test::NewTensor({4});
  Tensor m = op_test::NewTensor({5});
  Tensor v = op_test::NewTensor({4});
  EXPECT_DEATH(cpu::AdamW(p, g, m, v, AdamWParams{}), "m f32\\[5\\].*param f32\\[4\\]");
}

}  // namespace
}  // namespace sbp
