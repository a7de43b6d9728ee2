// The training loop end to end on a tiny model: it learns, accumulation is
// exact, and a resumed run ends bit-identical to an uninterrupted one.
#include "worker/train/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kernels/random.h"
#include "nlohmann/json.hpp"
#include "tests/worker/train/trainer_fixture.h"
#include "worker/model/file_util.h"
#include "worker/model/model_io.h"
#include "worker/train/checkpoint.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

class TrainerTest : public train_testing::TrainerFixture {};

TEST_F(TrainerTest, MemorisesATinyDataset) {
  JobSpec spec = Spec("memorise");
  spec.train.steps = 80;
  spec.train.schedule = LrSchedule::kConstant;
  spec.train.warmup_steps = 0;
  spec.train.weight_decay = 0;
  auto summary = RunTraining(spec, {}, nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const auto metrics = Metrics(spec);
  ASSERT_EQ(metrics.size(), 80u);
  const double first = metrics.front()["loss"], last = metrics.back()["loss"];
  EXPECT_LE(last, 0.1 * first) << "loss " << first << " -> " << last;
  for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_second",
                          "peak_bytes", "step_seconds"}) {
    EXPECT_TRUE(metrics.back().contains(key)) << key;
  }
}

// `auto` chunk sizes on a worker with a memory budget come from the memory
// planner: the run stays inside the budget, and a budget below the planner's
// minimum is refused before anything trains.
TEST_F(TrainerTest, AutoChunksFitTheMemoryBudget) {
  JobSpec spec = Spec("auto_chunks");
  spec.train.steps = 2;
  spec.streambp = {BackwardMode::kStream, 0, 0};
  spec.resources.memory_bytes = 3 << 20;
  auto summary = RunTraining(spec, {}, nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_LE(summary->peak_bytes, spec.resources.memory_bytes);

  JobSpec tiny = Spec("auto_chunks_too_small");
  tiny.streambp = {BackwardMode::kStream, 0, 0};
  tiny.resources.memory_bytes = 2300 << 10;  // holds the weights, not the whole plan
  auto refused = RunTraining(tiny, {}, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_FALSE(fs::exists(tiny.checkpoint.dir + "/metrics.jsonl"));
}

TEST_F(TrainerTest, ResumeIsBitIdenticalToAnUninterruptedRun) {
  JobSpec straight = Spec("straight");
  ASSERT_TRUE(RunTraining(straight, {}, nullptr).ok());

  JobSpec interrupted = Spec("interrupted");
  TrainOptions stop;
  stop.stop_after_step = 7;  // between the periodic checkpoints at 5 and 10
  auto first = RunTraining(interrupted, stop, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->stopped_early);
  EXPECT_EQ(first->last_step, 7);
  auto second = RunTraining(interrupted, {}, nullptr);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->first_step, 8);

  EXPECT_EQ(FinalWeights(straight), FinalWeights(interrupted));
  const auto a = Metrics(straight), b = Metrics(interrupted);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;
    EXPECT_EQ(a[i]["grad_norm"], b[i]["grad_norm"]) << "step " << i + 1;
  }
}

TEST_F(TrainerTest, MicroBatchingDoesNotChangeTheResult) {
  JobSpec one = Spec("one_micro_batch");
  one.train.steps = 3;
  one.train.micro_batch_sequences = 4;
  JobSpec four = Spec("four_micro_batches");
  four.train.steps = 3;
  four.train.micro_batch_sequences = 1;
  ASSERT_TRUE(RunTraining(one, {}, nullptr).ok());
  ASSERT_TRUE(RunTraining(four, {}, nullptr).ok());
  const auto a = Metrics(one), b = Metrics(four);
  ASSERT_EQ(a.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i]["loss"].get<double>(), b[i]["loss"].get<double>(), 1e-6);
    EXPECT_NEAR(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>(), 1e-6);
  }
}

TEST_F(TrainerTest, MissingDataIsABadInputErrorAndLeavesTheRunAlone) {
  JobSpec spec = Spec("bad_data");
  spec.train.steps = 2;
  ASSERT_TRUE(RunTraining(spec, {}, nullptr).ok());
  const std::string before = FinalWeights(spec);
  spec.data = (root_ / "missing.jsonl").string();
  spec.train.steps = 4;
  auto result = RunTraining(spec, {}, nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("missing.jsonl"), std::string::npos) << result.status();
  spec.train.steps = 2;
  EXPECT_EQ(FinalWeights(spec), before);
}

}  // namespace
}  // namespace sbp
