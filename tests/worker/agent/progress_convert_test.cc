#include "worker/agent/progress_convert.h"

#include <gtest/gtest.h>

namespace sbp {
namespace {

TEST(ToJobProgressTest, CopiesEveryFigure) {
  StepReport r;
  r.step = 7;
  r.total_steps = 20;
  r.loss = 2.5;
  r.lr = 1e-3;
  r.grad_norm = 0.75;
  r.tokens = 128;
  r.tokens_total = 896;
  r.step_seconds = 0.5;
  r.tokens_per_second = 256;
  r.mfu = 0.125;
  r.peak_bytes = 1 << 20;
  r.current_bytes = 1 << 19;
  const streambp::v1::JobProgress p = ToJobProgress(r, 6.5);
  EXPECT_EQ(p.step(), 7);
  EXPECT_EQ(p.total_steps(), 20);
  EXPECT_DOUBLE_EQ(p.loss(), 2.5);
  EXPECT_DOUBLE_EQ(p.learning_rate(), 1e-3);
  EXPECT_DOUBLE_EQ(p.grad_norm(), 0.75);
  EXPECT_DOUBLE_EQ(p.tokens_per_second(), 256);
  EXPECT_EQ(p.tokens_total(), 896);
  EXPECT_DOUBLE_EQ(p.mfu(), 0.125);
  EXPECT_EQ(p.peak_bytes(), 1 << 20);
  EXPECT_EQ(p.current_bytes(), 1 << 19);
  EXPECT_DOUBLE_EQ(p.step_seconds(), 0.5);
  EXPECT_DOUBLE_EQ(p.eta_seconds(), 6.5);
  EXPECT_FALSE(p.has_updated_at());
  // The device tier, no offload: the tier fields say so and copy nothing.
  EXPECT_EQ(p.checkpoint_tier(), "device");
  EXPECT_FALSE(p.optimizer_offload());
  EXPECT_DOUBLE_EQ(p.offload_copy_bytes_per_second(), 0);
  // No rollouts: the message is absent, not zero.
  EXPECT_FALSE(p.has_rollout());
}

TEST(ToJobProgressTest, CopiesTheRolloutFiguresOfOnlineGrpo) {
  StepReport r;
  r.step = 5;
  r.rollout.present = true;
  r.rollout.reward_mean = 0.42;
  r.rollout.reward_std = 0.1;
  r.rollout.completion_length_mean = 37.5;
  r.rollout.completion_length_max = 64;
  r.rollout.truncated_fraction = 0.05;
  r.rollout.rollout_tokens = 600;
  r.rollout.rollout_seconds = 1.5;
  r.rollout.train_seconds = 0.5;
  r.rollout.rollout_tokens_per_second = 400;
  const streambp::v1::JobProgress p = ToJobProgress(r, 1);
  ASSERT_TRUE(p.has_rollout());
  EXPECT_DOUBLE_EQ(p.rollout().reward_mean(), 0.42);
  EXPECT_DOUBLE_EQ(p.rollout().reward_std(), 0.1);
  EXPECT_DOUBLE_EQ(p.rollout().completion_length_mean(), 37.5);
  EXPECT_EQ(p.rollout().completion_length_max(), 64);
  EXPECT_DOUBLE_EQ(p.rollout().truncated_fraction(), 0.05);
  EXPECT_DOUBLE_EQ(p.rollout().rollout_tokens_per_second(), 400);
  EXPECT_DOUBLE_EQ(p.rollout().rollout_seconds(), 1.5);
  EXPECT_DOUBLE_EQ(p.rollout().train_seconds(), 0.5);

  // A step whose figures are all zero still says it sampled online.
  StepReport zero;
  zero.rollout.present = true;
  EXPECT_TRUE(ToJobProgress(zero, 1).has_rollout());
}

TEST(ToJobProgressTest, CopiesTheMemoryTiersAndTheCopyRate) {
  StepReport r;
  r.step = 3;
  r.checkpoint_tier = "host";
  r.optimizer_offload = true;
  r.host_tier_bytes = 3 << 20;
  r.host_tier_peak_bytes = 4 << 20;
  r.disk_tier_bytes = 0;
  r.offload_copy_bytes = 8 << 20;
  r.offload_copy_seconds = 0.5;
  r.offload_wait_seconds = 0.125;
  const streambp::v1::JobProgress p = ToJobProgress(r, 1);
  EXPECT_EQ(p.checkpoint_tier(), "host");
  EXPECT_TRUE(p.optimizer_offload());
  EXPECT_EQ(p.host_tier_bytes(), 3 << 20);
  EXPECT_EQ(p.host_tier_peak_bytes(), 4 << 20);
  EXPECT_EQ(p.disk_tier_bytes(), 0);
  EXPECT_DOUBLE_EQ(p.offload_copy_bytes_per_second(), 16 << 20);  // 8 MiB in 0.5 s
  EXPECT_DOUBLE_EQ(p.offload_wait_seconds(), 0.125);

  r.checkpoint_tier = "disk";
  r.disk_tier_bytes = 5 << 20;
  r.offload_copy_bytes = 1 << 20;
  r.offload_copy_seconds = 0;  // not measured: no rate rather than infinity
  const streambp::v1::JobProgress d = ToJobProgress(r, 1);
  EXPECT_EQ(d.checkpoint_tier(), "disk");
  EXPECT_EQ(d.disk_tier_bytes(), 5 << 20);
  EXPECT_DOUBLE_EQ(d.offload_copy_bytes_per_second(), 0);
}

TEST(EstimateEtaSecondsTest, MeanStepTimeTimesStepsLeft) {
  // 4 steps (1..4) in 2 s -> 0.5 s per step, 6 left.
  EXPECT_DOUBLE_EQ(EstimateEtaSeconds(4, 10, 1, 2.0), 3.0);
}

TEST(EstimateEtaSecondsTest, CountsOnlyStepsOfThisRunAfterAResume) {
  // Resumed after step 50: steps 51..60 took 5 s, 40 left.
  EXPECT_DOUBLE_EQ(EstimateEtaSeconds(60, 100, 51, 5.0), 20.0);
}

TEST(EstimateEtaSecondsTest, UnknownBeforeAnyMeasurementAndZeroAtTheEnd) {
  EXPECT_LT(EstimateEtaSeconds(0, 10, 1, 0.0), 0);
  EXPECT_LT(EstimateEtaSeconds(3, 10, 1, 0.0), 0);
  EXPECT_DOUBLE_EQ(EstimateEtaSeconds(10, 10, 1, 9.0), 0.0);
}

}  // namespace
}  // namespace sbp
