#include "kernels/cpu/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/op_test_util.h"

namespace sbp {
namespace {

using op_test::Vec;

double SiluReference(double g) { return g / (1.0 + std::exp(-g)); }

Vec SwigluReference(const Vec& gate, const Vec& up) {
  Vec out(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) out[i] = SiluReference(gate[i]) * up[i];
  return out;
}

TEST(Swiglu, ForwardMatchesReference) {
  Tensor gate = op_test::RandomTensor({6, 10}, 1, 3.0f);
  Tensor up = op_test::RandomTensor({6, 10}, 2);
  Tensor out = op_test::NewTensor({6, 10});
  cpu::SwigluForward(gate, up, out);
  EXPECT_LT(op_test::RelErr(out, SwigluReference(op_test::ToDouble(gate), op_test::ToDouble(up))),
            op_test::kForwardTol);
}

TEST(Swiglu, BackwardMatchesFiniteDifferences) {
  const Shape shape = {4, 7};
  Tensor gate = op_test::RandomTensor(shape, 3, 2.0f);
  Tensor up = op_test::RandomTensor(shape, 4);
  Tensor dout = op_test::RandomTensor(shape, 5);
  const Vec g = op_test::ToDouble(gate), u = op_test::ToDouble(up), r = op_test::ToDouble(dout);
  const Vec numeric_gate = op_test::NumericGradient(
      [&](const Vec& v) { return op_test::Dot(SwigluReference(v, u), r); }, g);
  const Vec numeric_up = op_test::NumericGradient(
      [&](const Vec& v) { return op_test::Dot(SwigluReference(g, v), r); }, u);
  Tensor dgate = op_test::NewTensor(shape);
  Tensor dup = op_test::NewTensor(shape);
  cpu::SwigluBackward(gate, up, dout, dgate, dup);
  EXPECT_LT(op_test::RelErr(dgate, numeric_gate), op_test::kGradTol);
  EXPECT_LT(op_test::RelErr(dup, numeric_up), op_test::kGradTol);

  // In place: dgate aliases gate and dup aliases up.
  Tensor gate2 = op_test::Clone(gate);
  Tensor up2 = op_test::Clone(up);
  cpu::SwigluBackward(gate2, up2, dout, gate2, up2);
  EXPECT_TRUE(op_test::BitwiseEqual(gate2, dgate));
  EXPECT_TRUE(op_test::BitwiseEqual(up2, dup));
}

TEST(Swiglu, LargeAndExtremeInputsStayFinite) {
  const Shape shape = {64, 1024};  // parallel path
  Tensor gate = op_test::RandomTensor(shape, 6, 4.0f);
  float* g = gate.data<float>();
  g[0] = 1e4f;
  g[1] = -1e4f;
  g[2] = 100.0f;
  g[3] = -100.0f;
  Tensor up = op_test::RandomTensor(shape, 7);
  Tensor dout = op_test::RandomTensor(shape, 8);
  Tensor out = op_test::NewTensor(shape);
  cpu::SwigluForward(gate, up, out);
  const Vec gd = op_test::ToDouble(gate), ud = op_test::ToDouble(up), r = op_test::ToDouble(dout);
  EXPECT_LT(op_test::RelErr(out, SwigluReference(gd, ud)), op_test::kForwardTol);
  Tensor dgate = op_test::NewTensor(shape);
  Tensor dup = op_test::NewTensor(shape);
  cpu::SwigluBackward(gate, up, dout, dgate, dup);
  Vec want_dgate(gd.size()), want_dup(gd.size());
  for (size_t i = 0; i < gd.size(); ++i) {
    const double s = 1.0 / (1.0 + std::exp(-gd[i]));
    want_dgate[i] = r[i] * ud[i] * s * (1.0 + gd[i] * (1.0 - s));
    want_dup[i] = r[i] * gd[i] * s;
  }
  EXPECT_LT(op_test::RelErr(dgate, want_dgate), op_test::kForwardTol);
  EXPECT_LT(op_test::RelErr(dup, want_dup), op_test::kForwardTol);
  for (const Tensor* t : {&out, &dgate, &dup}) {
    for (int64_t i = 0; i < 4; ++i) EXPECT_TRUE(std::isfinite(t->data<float>()[i])) << i;
  }
  EXPECT_EQ(out.data<float>()[1], 0.0f);  // silu(-1e4) = 0
}

TEST(SwigluDeathTest, ShapeMismatchNamesShapes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor gate = op_test::RandomTensor({2, 3}, 9);
  Tensor up = op_test::RandomTensor({3, 2}, 10);
  Tensor out = op_test::NewTensor({2, 3});
  EXPECT_DEATH(cpu::SwigluForward(gate, up, out), "up f32\\[3, 2\\].*gate f32\\[2, 3\\]");
}

}  // namespace
}  // namespace sbp
