// The run directory's record and fence (worker/train/run_directory.h): a job
// never writes another's run unless it continues it on purpose, and then the
// older job's attempts are stale; runs are found by job name, newest first.
#include "worker/train/run_directory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "common/failure_kind.h"
#include "worker/model/file_util.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class RunDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("run_directory_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "runs");
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string Run(const std::string& name) const { return (root_ / "runs" / name).string(); }
  fs::path root_;
};

TEST_F(RunDirectoryTest, AnotherJobIsRefusedNamingTheResumeFlag) {
  const std::string run = Run("a");
  ASSERT_TRUE(RunFence::Claim(run, {"job-a", "h1", 1, "a"}, false).ok());
  const absl::StatusOr<RunFence> other = RunFence::Claim(run, {"job-b", "h1", 1, "a"}, false);
  ASSERT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(), HasSubstr("--resume job-a"));
  EXPECT_THAT(other.status().message(), HasSubstr("resume_from: " + run));
  // The record is the first job's still.
  absl::StatusOr<RunRecord> record = ReadRunRecord(run);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->identity.job_id, "job-a");
}

TEST_F(RunDirectoryTest, ContinuingTakesTheRunOverAndFencesTheOlderJob) {
  const std::string run = Run("a");
  absl::StatusOr<RunFence> first = RunFence::Claim(run, {"job-a", "h1", 2, "a"}, false);
  ASSERT_TRUE(first.ok());
  // Another spec (a changed learning rate), continuing on purpose, at its first attempt.
  absl::StatusOr<RunFence> second = RunFence::Claim(run, {"job-b", "h2", 1, "a"}, true);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->Check().ok());
  const absl::Status stale = first->Check();
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(GetFailureKind(stale), FailureKind::kStaleAttempt);
  EXPECT_THAT(stale.message(), HasSubstr("job job-b has taken over"));
  // The same job's older attempt stays stale even when continuing.
  EXPECT_EQ(RunFence::Claim(run, {"job-b", "h2", 0, "a"}, true).status().code(),
            absl::StatusCode::kAborted);
}

TEST_F(RunDirectoryTest, CheckpointsWithoutARecordNeedTheFlag) {
  const std::string run = Run("old");
  fs::create_directories(run + "/checkpoints");
  const absl::StatusOr<RunFence> claim = RunFence::Claim(run, {"", "h", 0, "old"}, false);
  ASSERT_FALSE(claim.ok());
  EXPECT_THAT(claim.status().message(), HasSubstr("--resume " + run));
  EXPECT_TRUE(RunFence::Claim(run, {"", "h", 0, "old"}, true).ok());
}

TEST_F(RunDirectoryTest, ContinuesRunComparesNormalisedPaths) {
  JobSpec spec;
  EXPECT_FALSE(ContinuesRun(spec, "runs/a", "."));
  spec.resume_from = "runs/a/";
  EXPECT_TRUE(ContinuesRun(spec, "runs/a", "."));
  EXPECT_TRUE(ContinuesRun(spec, "./runs/a", ""));
  EXPECT_FALSE(ContinuesRun(spec, "runs/b", "."));
  spec.resume_from = "runs/a/checkpoints/step-00000004";  // a new run from a checkpoint
  EXPECT_FALSE(ContinuesRun(spec, "runs/a", "."));
  spec.resume_from = "runs/a";
  EXPECT_TRUE(ContinuesRun(spec, "/area/runs/a", "/area"));
}

TEST_F(RunDirectoryTest, RunsOfAJobNewestFirst) {
  ASSERT_TRUE(RunFence::Claim(Run("a"), {"", "h", 0, "tiny"}, false).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(RunFence::Claim(Run("b"), {"", "h", 0, "other"}, false).ok());
  ASSERT_TRUE(RunFence::Claim(Run("c"), {"", "h", 0, "tiny"}, false).ok());
  // A record from before names were kept: found by its directory's name.
  fs::create_directories(Run("tiny"));
  ASSERT_TRUE(WriteFileAtomically(Run("tiny") + "/run.json",
                                  R"({"job_id": "", "spec_hash": "h", "attempt": 0})")
                  .ok());
  fs::last_write_time(Run("tiny") + "/run.json",
                      fs::file_time_type::clock::now() - std::chrono::hours(24));
  fs::create_directories(Run("junk"));
  ASSERT_TRUE(WriteFileAtomically(Run("junk") + "/run.json", "not json").ok());
  EXPECT_EQ(FindRunsOfJob((root_ / "runs").string(), "tiny"),
            (std::vector<std::string>{Run("c"), Run("a"), Run("tiny")}));
  EXPECT_TRUE(FindRunsOfJob((root_ / "nowhere").string(), "tiny").empty());
}

TEST_F(RunDirectoryTest, TheStopIsRecordedBesideTheIdentity) {
  const std::string run = Run("a");
  ASSERT_TRUE(RunFence::Claim(run, {"job-a", "h1", 3, "a"}, false).ok());
  ASSERT_TRUE(RecordRunStop(run, {"interrupted", 7, run + "/checkpoints/step-00000007"}).ok());
  const std::string text = *ReadFileToString(run + "/run.json");
  EXPECT_THAT(text, HasSubstr(R"("stopped":{"checkpoint":")"));
  EXPECT_THAT(text, HasSubstr(R"("how":"interrupted","step":7)"));
  absl::StatusOr<RunRecord> record = ReadRunRecord(run);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->identity.attempt, 3);
  EXPECT_EQ(record->identity.name, "a");
  EXPECT_EQ(ReadRunRecord(Run("none")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sbp
