// A run asked to stop (a cancel or a preemption, through the observer) ends
// at the next step boundary with a checkpoint of the last finished step, even
// when an older periodic checkpoint exists, so that resuming loses nothing
// and ends bit-identical to an uninterrupted run.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/worker/train/trainer_fixture.h"
#include "worker/train/checkpoint.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

class TrainerStopTest : public train_testing::TrainerFixture {};

// Asks to stop once step `after` is done, as the worker does when told.
class StopAfter final : public TrainingObserver {
 public:
  explicit StopAfter(int64_t after) : after_(after) {}
  void OnStep(const StepReport& report) override { last_ = report.step; }
  bool StopRequested() override { return last_ >= after_; }

 private:
  int64_t after_;
  int64_t last_ = 0;
};

TEST_F(TrainerStopTest, AStopRequestCheckpointsTheLastFinishedStep) {
  JobSpec straight = Spec("straight");
  ASSERT_TRUE(RunTraining(straight, {}, nullptr).ok());

  JobSpec stopped = Spec("stopped");  // periodic checkpoints at 5 and 10
  StopAfter observer(7);
  auto first = RunTraining(stopped, {}, &observer);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->stopped_early);
  EXPECT_EQ(first->last_step, 7);
  EXPECT_EQ(first->last_checkpoint, CheckpointPath(stopped.checkpoint.dir, 7));
  EXPECT_TRUE(std::filesystem::exists(CheckpointPath(stopped.checkpoint.dir, 7)));

  auto second = RunTraining(stopped, {}, nullptr);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->first_step, 8);
  EXPECT_EQ(FinalWeights(straight), FinalWeights(stopped));
}

}  // namespace
}  // namespace sbp
