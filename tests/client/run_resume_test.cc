// The resume rule's local half (client/run_resume.h): which run `--resume`
// names, the spec that continues it, and where a new run goes.
#include "client/run_resume.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "worker/model/file_util.h"
#include "worker/train/run_directory.h"

namespace sbp::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class RunResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = (fs::temp_directory_path() /
             ("run_resume_" +
              std::string(::testing::UnitTest::GetInstance()->current_test_info()->name())))
                .string();
    fs::remove_all(base_);
    fs::create_directories(base_ + "/runs");
    spec_.name = "tiny";
  }
  void TearDown() override { fs::remove_all(base_); }
  void MakeRun(const std::string& dir, const std::string& name) {
    ASSERT_TRUE(RunFence::Claim(base_ + "/" + dir, {"", "h", 0, name}, false).ok());
  }
  std::string base_;
  JobSpec spec_;
};

TEST_F(RunResumeTest, BareResumeTakesTheNewestRunOfTheName) {
  EXPECT_THAT(LocalRunToResume(spec_, {true, ""}, base_).status().message(),
              HasSubstr("--resume: no run of job tiny"));
  MakeRun("runs/tiny", "tiny");
  MakeRun("runs/tiny-2", "tiny");
  MakeRun("runs/other", "other");
  EXPECT_EQ(*LocalRunToResume(spec_, {true, ""}, base_), base_ + "/runs/tiny-2");
  // A named run directory, or a job id under runs/.
  EXPECT_EQ(*LocalRunToResume(spec_, {true, "runs/tiny"}, base_), base_ + "/runs/tiny");
  EXPECT_EQ(*LocalRunToResume(spec_, {true, "other"}, base_), base_ + "/runs/other");
  EXPECT_THAT(LocalRunToResume(spec_, {true, "nope"}, base_).status().message(),
              HasSubstr("--resume nope: no such run directory"));
  fs::create_directories(base_ + "/empty");
  EXPECT_THAT(LocalRunToResume(spec_, {true, "empty"}, base_).status().message(),
              HasSubstr("is not a run directory"));
  // A spec with its own checkpoint.dir: that one.
  spec_.checkpoint.dir = "runs/tiny";
  EXPECT_EQ(*LocalRunToResume(spec_, {true, ""}, base_), base_ + "/runs/tiny");
}

TEST_F(RunResumeTest, ANewRunNeverWritesAnEarlierOne) {
  std::string not_resumed;
  EXPECT_EQ(*LocalRunForNewJob(spec_, base_, &not_resumed), base_ + "/runs/tiny");
  EXPECT_EQ(not_resumed, "");
  MakeRun("runs/tiny", "tiny");
  EXPECT_EQ(*LocalRunForNewJob(spec_, base_, &not_resumed), base_ + "/runs/tiny-2");
  EXPECT_EQ(not_resumed, base_ + "/runs/tiny");
  MakeRun("runs/tiny-2", "tiny");
  EXPECT_EQ(*LocalRunForNewJob(spec_, base_, &not_resumed), base_ + "/runs/tiny-3");
  EXPECT_EQ(not_resumed, base_ + "/runs/tiny-2");
  // A named checkpoint.dir that holds a run: refused, naming the flag.
  spec_.checkpoint.dir = "runs/tiny";
  const absl::Status refused = LocalRunForNewJob(spec_, base_, &not_resumed).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("continue it with --resume"));
}

TEST_F(RunResumeTest, TheContinuingSpecNamesTheRunTwiceAndKeepsTheRest) {
  const std::string yaml =
      "name: tiny\nmodel: m\ndata: d.jsonl\nobjective: sft\nseq_len: 8\n"
      "train: {steps: 4, sequences_per_step: 2, lr: 0.01}\n"
      "checkpoint: {every_steps: 2, keep_last: 1}\n";
  absl::StatusOr<std::string> continuing = SpecContinuingRun(yaml, "runs/tiny-2");
  ASSERT_TRUE(continuing.ok()) << continuing.status();
  absl::StatusOr<JobSpec> parsed = ParseJobSpec(*continuing, "job.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << *continuing;
  absl::StatusOr<JobSpec> original = ParseJobSpec(yaml, "job.yaml");
  ASSERT_TRUE(original.ok());
  EXPECT_EQ(parsed->checkpoint.dir, "runs/tiny-2");
  EXPECT_EQ(parsed->resume_from, "runs/tiny-2");
  EXPECT_EQ(parsed->checkpoint.every_steps, 2);
  EXPECT_EQ(parsed->checkpoint.keep_last, 1);
  parsed->checkpoint.dir.clear();
  parsed->resume_from.clear();
  EXPECT_EQ(*parsed, *original);
  EXPECT_FALSE(SpecContinuingRun("- a list\n", "runs/x").ok());
  EXPECT_FALSE(SpecContinuingRun("name: [unclosed\n", "runs/x").ok());
}

}  // namespace
}  // namespace sbp::cli
