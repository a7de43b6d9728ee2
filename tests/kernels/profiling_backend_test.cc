// ProfilingBackend (kernels/profiling_backend.h) around the CPU backend: the
// same inputs give bit-identical outputs and return values with and without
// the wrapper, and every call is counted under its op with a non-negative
// time.
#include "kernels/profiling_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "tests/kernels/op_test_util.h"

namespace sbp {
namespace {

using op_test::BitwiseEqual;
using op_test::NewTensor;
using op_test::RandomInts;
using op_test::RandomTensor;
using Op = ProfilingBackend::Op;

// Outputs of a few ops (a matmul in two layouts, RMSNorm forward and
// backward, attention forward and backward, the fused cross-entropy and a
// reduction), run on `backend` from fixed inputs.
struct Outputs {
  Tensor y, y_acc, norm, rstd, dx, dweight, attn, lse, dq, dk, dv, logits;
  double loss = 0, sum_squares = 0;
};

Outputs RunOps(Backend& backend) {
  Outputs o;
  const Tensor x = RandomTensor({24, 32}, 1), w = RandomTensor({16, 32}, 2);
  o.y = NewTensor({24, 16});
  backend.MatmulXWt(x, w, o.y, /*accumulate=*/false);
  o.y_acc = RandomTensor({24, 16}, 3);
  backend.MatmulXWt(x, w, o.y_acc, /*accumulate=*/true);

  const Tensor weight = RandomTensor({32}, 4), dy = RandomTensor({24, 32}, 5);
  o.norm = NewTensor({24, 32});
  o.rstd = NewTensor({24});
  backend.RmsNormForward(x, weight, 1e-6f, o.norm, &o.rstd);
  o.dx = NewTensor({24, 32});
  o.dweight = NewTensor({32});
  backend.RmsNormBackward(x, weight, o.rstd, dy, o.dx, o.dweight);

  // GQA: 4 query heads on 2 KV heads, d = 8, a query chunk at offset 4.
  const Tensor q = RandomTensor({12, 4, 8}, 6), k = RandomTensor({16, 2, 8}, 7),
               v = RandomTensor({16, 2, 8}, 8), dout = RandomTensor({12, 4, 8}, 9);
  const float scale = 1.0f / std::sqrt(8.0f);
  o.attn = NewTensor({12, 4, 8});
  o.lse = NewTensor({12, 4});
  backend.AttentionForward(q, k, v, /*q_offset=*/4, scale, o.attn, &o.lse);
  o.dq = NewTensor({12, 4, 8});
  o.dk = NewTensor({16, 2, 8});
  o.dv = NewTensor({16, 2, 8});
  backend.AttentionBackward(q, k, v, o.attn, dout, o.lse, 4, scale, o.dq, o.dk, o.dv);

  o.logits = RandomTensor({10, 50}, 10);
  const Tensor targets = RandomInts({10}, 11, 0, 50);
  o.loss = backend.CrossEntropyForwardBackward(o.logits, targets, 0.1f);
  o.sum_squares = backend.SumSquares(o.y);
  return o;
}

TEST(ProfilingBackendTest, ResultsAreTheWrappedBackendsBitForBit) {
  CpuAllocator allocator;
  CpuBackend cpu(allocator);
  ProfilingBackend profiled(cpu);
  const Outputs want = RunOps(cpu);
  const Outputs got = RunOps(profiled);
  const std::vector<std::pair<const char*, std::pair<const Tensor*, const Tensor*>>> pairs = {
      {"y", {&got.y, &want.y}},          {"y_acc", {&got.y_acc, &want.y_acc}},
      {"norm", {&got.norm, &want.norm}}, {"rstd", {&got.rstd, &want.rstd}},
      {"dx", {&got.dx, &want.dx}},       {"dweight", {&got.dweight, &want.dweight}},
      {"attn", {&got.attn, &want.attn}}, {"lse", {&got.lse, &want.lse}},
      {"dq", {&got.dq, &want.dq}},       {"dk", {&got.dk, &want.dk}},
      {"dv", {&got.dv, &want.dv}},       {"logits", {&got.logits, &want.logits}},
  };
  for (const auto& [name, p] : pairs) {
    EXPECT_TRUE(BitwiseEqual(*p.first, *p.second)) << name;
  }
  EXPECT_EQ(got.loss, want.loss);
  EXPECT_EQ(got.sum_squares, want.sum_squares);
}

TEST(ProfilingBackendTest, CountsEveryCallUnderItsOp) {
  CpuAllocator allocator;
  CpuBackend cpu(allocator);
  ProfilingBackend profiled(cpu);
  EXPECT_EQ(profiled.device(), Device::Cpu());
  EXPECT_EQ(&profiled.allocator(), &allocator);
  EXPECT_EQ(profiled.activation_dtype(), DType::kF32);
  EXPECT_TRUE(profiled.Stats().empty());

  RunOps(profiled);
  RunOps(profiled);
  EXPECT_EQ(profiled.calls(Op::kMatmulXWt), 4);
  EXPECT_EQ(profiled.calls(Op::kRmsNormForward), 2);
  EXPECT_EQ(profiled.calls(Op::kRmsNormBackward), 2);
  EXPECT_EQ(profiled.calls(Op::kAttentionForward), 2);
  EXPECT_EQ(profiled.calls(Op::kAttentionBackward), 2);
  EXPECT_EQ(profiled.calls(Op::kCrossEntropyForwardBackward), 2);
  EXPECT_EQ(profiled.calls(Op::kSumSquares), 2);
  EXPECT_EQ(profiled.calls(Op::kMatmulDyW), 0);

  // A copy through the wrapper is counted too (transfers are ops here).
  const Tensor src = RandomTensor({8}, 12);
  Tensor dst = NewTensor({8});
  profiled.Copy(src, dst);
  EXPECT_TRUE(BitwiseEqual(src, dst));
  EXPECT_EQ(profiled.calls(Op::kCopy), 1);

  const std::vector<ProfilingBackend::OpStats> stats = profiled.Stats();
  std::set<std::string> names;
  double total = 0;
  int64_t calls = 0;
  for (size_t i = 0; i < stats.size(); ++i) {
    names.insert(stats[i].name);
    EXPECT_GE(stats[i].seconds, 0.0) << stats[i].name;
    EXPECT_GT(stats[i].calls, 0) << stats[i].name;
    if (i > 0) {
      EXPECT_GE(stats[i - 1].seconds, stats[i].seconds);  // most time first
    }
    total += stats[i].seconds;
    calls += stats[i].calls;
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"matmul_xwt", "rms_norm_forward", "rms_norm_backward",
                                   "attention_forward", "attention_backward",
                                   "cross_entropy_forward_backward", "sum_squares", "copy"}));
  EXPECT_EQ(calls, 4 + 2 + 2 + 2 + 2 + 2 + 2 + 1);
  EXPECT_DOUBLE_EQ(total, profiled.total_seconds());
  EXPECT_GT(profiled.total_seconds(), 0.0);

  profiled.Reset();
  EXPECT_TRUE(profiled.Stats().empty());
  EXPECT_EQ(profiled.total_seconds(), 0.0);
}

TEST(ProfilingBackendTest, EveryOpHasADistinctName) {
  std::set<std::string> names;
  for (int i = 0; i < static_cast<int>(Op::kNumOps); ++i) {
    names.insert(ProfilingBackend::OpName(static_cast<Op>(i)));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(Op::kNumOps));
  EXPECT_STREQ(ProfilingBackend::OpName(Op::kAttentionBackward), "attention_backward");
}

}  // namespace
}  // namespace sbp
