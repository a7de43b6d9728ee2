// A checkpoint directory is a model with its resume state apart
// (trainer_state/), and <run>/checkpoints/latest is a relative link to the
// newest one. Checkpoints of the older layout (state beside the weights,
// `latest` a text file) still resume bit for bit and are pruned like new
// ones; every command's checkpoint argument resolves run directories and
// `latest` in either form; the link works under a job's file confinement.
#include "worker/train/checkpoint_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "common/file_confinement.h"
#include "tests/worker/train/test_util.h"
#include "tests/worker/train/trainer_fixture.h"
#include "worker/model/file_util.h"
#include "worker/train/checkpoint.h"
#include "worker/train/checkpoint_argument.h"
#include "worker/train/latest_link.h"
#include "worker/train/run_directory.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

class CheckpointLayoutTest : public train_testing::TrainerFixture {
 protected:
  // Rewrites every checkpoint of `run_dir` in the older layout: the state
  // files beside the weights, `latest` a text file naming the newest.
  static void ToOldLayout(const std::string& run_dir) {
    std::string newest;
    for (const auto& entry : fs::directory_iterator(run_dir + "/checkpoints")) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step-", 0) != 0) continue;
      const fs::path state = entry.path() / kTrainerStateDir;
      for (const auto& file : fs::directory_iterator(state)) {
        fs::rename(file.path(), entry.path() / file.path().filename());
      }
      fs::remove(state);
      newest = std::max(newest, name);
    }
    fs::remove(run_dir + "/checkpoints/latest");
    train_testing::WriteFile(run_dir + "/checkpoints/latest", newest + "\n");
  }
};

TEST_F(CheckpointLayoutTest, ResumeStateLivesApartAndLatestIsALink) {
  JobSpec spec = Spec("layout");
  spec.checkpoint.keep_last = 2;
  ASSERT_TRUE(RunTraining(spec, {}, nullptr).ok());
  const std::string last = CheckpointPath(spec.checkpoint.dir, 12);
  for (const char* model_file : {"config.json", "model.safetensors", "generation_config.json"}) {
    EXPECT_TRUE(fs::is_regular_file(last + "/" + model_file)) << model_file;
  }
  for (const char* state_file : {"optimizer.safetensors", "trainer_state.json"}) {
    EXPECT_TRUE(fs::is_regular_file(TrainerStateDir(last) + "/" + state_file)) << state_file;
    EXPECT_FALSE(fs::exists(last + "/" + state_file)) << state_file;
  }
  const fs::path latest = spec.checkpoint.dir + "/checkpoints/latest";
  ASSERT_TRUE(fs::is_symlink(latest));
  EXPECT_EQ(fs::read_symlink(latest), "step-00000012");  // relative: the run can move
  EXPECT_TRUE(fs::is_regular_file(latest / "model.safetensors"));
  EXPECT_FALSE(fs::exists(spec.checkpoint.dir + "/checkpoints/latest.tmp"));
  EXPECT_EQ(**FindLatestCheckpoint(spec.checkpoint.dir), last);
  // keep_last: 2 of 5, 10 and 12.
  EXPECT_FALSE(fs::exists(CheckpointPath(spec.checkpoint.dir, 5)));
  EXPECT_TRUE(fs::exists(CheckpointPath(spec.checkpoint.dir, 10)));
}

TEST_F(CheckpointLayoutTest, OldLayoutCheckpointsResumeBitForBitAndArePruned) {
  JobSpec straight = Spec("straight");
  ASSERT_TRUE(RunTraining(straight, {}, nullptr).ok());

  JobSpec old = Spec("old");
  old.checkpoint.keep_last = 2;
  TrainOptions stop;
  stop.stop_after_step = 7;
  ASSERT_TRUE(RunTraining(old, stop, nullptr).ok());
  ToOldLayout(old.checkpoint.dir);
  const std::string seven = CheckpointPath(old.checkpoint.dir, 7);
  ASSERT_TRUE(fs::exists(seven + "/trainer_state.json"));
  EXPECT_TRUE(IsCompleteCheckpoint(seven));
  EXPECT_EQ(FindTrainerStateDir(seven), seven);
  EXPECT_EQ(**FindLatestCheckpoint(old.checkpoint.dir), seven);
  EXPECT_EQ(*ResolveResumeFrom(old.checkpoint.dir), seven);

  auto resumed = RunTraining(old, {}, nullptr);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->first_step, 8);
  EXPECT_EQ(FinalWeights(straight), FinalWeights(old));
  EXPECT_EQ(FinalStateFile(straight, "optimizer.safetensors"),
            FinalStateFile(old, "optimizer.safetensors"));
  // The old text file became a link; keep_last pruned the old-layout ones.
  EXPECT_TRUE(fs::is_symlink(old.checkpoint.dir + "/checkpoints/latest"));
  EXPECT_FALSE(fs::exists(CheckpointPath(old.checkpoint.dir, 5)));
  EXPECT_FALSE(fs::exists(seven));
  EXPECT_TRUE(fs::exists(CheckpointPath(old.checkpoint.dir, 10)));
}

class CheckpointArgumentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = train_testing::MakeTempDir("checkpoint_argument");
    run_ = root_ + "/run";
    for (const char* step : {"step-00000002", "step-00000004"}) {
      const std::string dir = run_ + "/checkpoints/" + step;
      fs::create_directories(TrainerStateDir(dir));
      train_testing::WriteFile(dir + "/config.json", "{}");
      train_testing::WriteFile(TrainerStateDir(dir) + "/trainer_state.json", "{}");
    }
    ASSERT_TRUE(PointLatestAt(run_ + "/checkpoints", "step-00000004").ok());
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string Resolve(const std::string& path) {
    absl::StatusOr<std::string> resolved = ResolveCheckpointArgument("--model", path);
    EXPECT_TRUE(resolved.ok()) << path << ": " << resolved.status();
    return resolved.ok() ? *resolved : "";
  }

  std::string root_, run_;
};

TEST_F(CheckpointArgumentTest, RunDirectoriesAndLatestMeanTheNewestCheckpoint) {
  const std::string four = run_ + "/checkpoints/step-00000004";
  EXPECT_EQ(Resolve(run_), four);
  EXPECT_EQ(Resolve(run_ + "/"), four);
  EXPECT_EQ(Resolve(run_ + "/checkpoints"), four);
  EXPECT_EQ(Resolve(run_ + "/checkpoints/latest"), four);
  EXPECT_EQ(Resolve(run_ + "/checkpoints/latest/"), four);
  EXPECT_EQ(Resolve(four), four);
  EXPECT_EQ(*ResolveResumeFrom(run_ + "/checkpoints/latest"), four);
  EXPECT_EQ(Resolve(root_ + "/elsewhere"), root_ + "/elsewhere");  // the loader names it
  // An older run's `latest`: a text file.
  fs::remove(run_ + "/checkpoints/latest");
  train_testing::WriteFile(run_ + "/checkpoints/latest", "step-00000002\n");
  EXPECT_EQ(Resolve(run_ + "/checkpoints/latest"), run_ + "/checkpoints/step-00000002");
  EXPECT_EQ(Resolve(run_), run_ + "/checkpoints/step-00000002");
}

TEST_F(CheckpointArgumentTest, ErrorsNameTheArgumentAndWhatIsWrong) {
  fs::create_directories(root_ + "/fresh");
  train_testing::WriteFile(root_ + "/fresh/run.json", "{}");
  auto fresh = ResolveCheckpointArgument("--adapter", root_ + "/fresh");
  EXPECT_EQ(fresh.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fresh.status().message(),
            "--adapter: " + root_ + "/fresh is a run directory with no checkpoint yet");

  fs::remove(run_ + "/checkpoints/latest");
  train_testing::WriteFile(run_ + "/checkpoints/latest", "../../etc\n");
  auto climbing = ResolveCheckpointArgument("--model", run_ + "/checkpoints/latest");
  EXPECT_EQ(climbing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(climbing.status().message().find("--model: " + run_ + "/checkpoints/latest names"),
            std::string::npos)
      << climbing.status();
  // A run whose `latest` is unusable still has its newest checkpoint.
  EXPECT_EQ(Resolve(run_), run_ + "/checkpoints/step-00000004");

  fs::remove(run_ + "/checkpoints/latest");
  fs::create_directory_symlink("step-00000009", run_ + "/checkpoints/latest");
  auto gone = ResolveCheckpointArgument("--model", run_ + "/checkpoints/latest");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(gone.status().message().find("names step-00000009, which does not exist"),
            std::string::npos)
      << gone.status();
}

// A copy of the run that followed the link left a directory in its place:
// readers fall back to the newest checkpoint, and a writer names it.
TEST_F(CheckpointArgumentTest, ADirectoryInPlaceOfTheLinkIsNamed) {
  fs::remove(run_ + "/checkpoints/latest");
  fs::copy(run_ + "/checkpoints/step-00000004", run_ + "/checkpoints/latest",
           fs::copy_options::recursive);
  EXPECT_EQ(**FindLatestCheckpoint(run_), run_ + "/checkpoints/step-00000004");
  EXPECT_EQ(Resolve(run_), run_ + "/checkpoints/step-00000004");
  EXPECT_EQ(Resolve(run_ + "/checkpoints/latest"), run_ + "/checkpoints/latest");
  const absl::Status status = PointLatestAt(run_ + "/checkpoints", "step-00000002");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find(run_ + "/checkpoints/latest is a directory"), std::string::npos)
      << status;
}

// A confined job writes the link in its run directory and reads a model
// through it; it cannot write one elsewhere.
TEST_F(CheckpointArgumentTest, TheLinkWorksUnderFileConfinement) {
  fs::create_directories(root_ + "/other");
  ScopedFileConfinement confined({{}, {run_}});
  ASSERT_TRUE(PointLatestAt(run_ + "/checkpoints", "step-00000002").ok());
  auto config = ReadFileToString(run_ + "/checkpoints/latest/config.json");
  EXPECT_TRUE(config.ok()) << config.status();
  const absl::Status outside = PointLatestAt(root_ + "/other", "step-00000002");
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument) << outside;
  EXPECT_FALSE(fs::exists(root_ + "/other/latest"));
}

}  // namespace
}  // namespace sbp
