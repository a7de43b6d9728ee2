// `sbp run`: an embedded coordinator and local workers in one process run a
// job end to end; a bad spec is exit code 2; --state-dir keeps the state.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;

// One training thread: the embedded services share the test machine's cores.
std::string SbpRun() { return std::string("OMP_NUM_THREADS=1 ") + SbpBinary() + " run"; }

class RunCommandTest : public ::testing::Test {
 protected:
  void SetUp() override { cluster_ = std::make_unique<Cluster>("run_command"); }
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(RunCommandTest, RunsATinyJobToSuccess) {
  Cluster& c = *cluster_;
  c.WriteSpec("tiny", c.Spec("tiny", 4, 4, 2));
  const CommandResult r = RunCommand(SbpRun() + " tiny.yaml", c.dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("SUCCEEDED"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("4/4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("embedded coordinator"), std::string::npos) << r.err;
  const std::string metrics = ReadAll((c.dir() / "runs/tiny/metrics.jsonl").string());
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 4);
  EXPECT_TRUE(fs::exists(c.dir() / "runs/tiny/checkpoints/step-00000004"));
}

// Without checkpoint.dir every job has a run directory of its own: the same
// spec run twice trains twice from step 1, and never resumes the first run.
TEST_F(RunCommandTest, TheSameSpecTwiceTrainsTwiceFromStepOne) {
  Cluster& c = *cluster_;
  std::string spec = c.Spec("again", 3, 4, 3);
  spec.replace(spec.find(", dir: runs/again"), 17, "");
  c.WriteSpec("again", spec);
  for (int i = 0; i < 2; ++i) {
    const CommandResult r = RunCommand(SbpRun() + " again.yaml", c.dir());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  std::vector<fs::path> runs;
  for (const auto& entry : fs::directory_iterator(c.dir() / "runs")) {
    if (entry.path().filename().string().rfind("again-", 0) == 0) runs.push_back(entry.path());
  }
  ASSERT_EQ(runs.size(), 2u);
  for (const fs::path& run : runs) {
    const std::string metrics = ReadAll((run / "metrics.jsonl").string());
    EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 3) << run;
    const auto first = nlohmann::json::parse(metrics.substr(0, metrics.find('\n')), nullptr, false);
    EXPECT_EQ(first.value("step", -1), 1) << run << ": " << metrics;
  }
}

TEST_F(RunCommandTest, TwoWorkersAndAKeptStateDirectory) {
  Cluster& c = *cluster_;
  c.WriteSpec("two", c.Spec("two", 3, 2, 0));
  const CommandResult r = RunCommand(SbpRun() + " two.yaml --workers 2 --state-dir state", c.dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("2 local workers"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(c.dir() / "state/coordinator.db"));
}

// Without --workers, as many local workers as the job's world size: a
// two-rank job runs (before, one worker was started and the job waited for
// ever with no reason shown); fewer than it needs is refused at once.
TEST_F(RunCommandTest, WorkersDefaultToTheJobsWorldSize) {
  Cluster& c = *cluster_;
  c.WriteSpec("zero2", c.Spec("zero2", 2, 2, 0, "resources: {world_size: 2}\n"));
  CommandResult r = RunCommand(SbpRun() + " zero2.yaml", c.dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("2 local workers"), std::string::npos) << r.err;
  r = RunCommand(SbpRun() + " zero2.yaml --workers 1", c.dir());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--workers 1: the job needs 2 workers (resources.world_size)"),
            std::string::npos)
      << r.err;
}

// SIGTERM (what timeout, systemd, docker stop and Slurm send) stops `sbp run`
// as Ctrl-C does: the job is cancelled, everything shuts down, and the
// temporary state directory is removed; before, the process died at once.
TEST_F(RunCommandTest, SigtermCancelsTheJobAndCleansUp) {
  Cluster& c = *cluster_;
  c.WriteSpec("long", c.Spec("long", 1000000, 2, 0));
  Process run({SbpBinary(), "run", "long.yaml"}, c.dir(), c.dir() / "run.log");
  const std::string log = (c.dir() / "run.log").string();
  ASSERT_TRUE(WaitFor([&] { return ReadAll(log).find("local worker") != std::string::npos; },
                      std::chrono::seconds(30)))
      << ReadAll(log);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // training
  const std::string text = ReadAll(log);
  const size_t at = text.find("(state in ");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string state = text.substr(at + 10, text.find(')', at) - at - 10);
  ASSERT_TRUE(fs::exists(state)) << state;
  ::kill(run.pid(), SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return !run.running(); }, std::chrono::seconds(30))) << ReadAll(log);
  EXPECT_EQ(run.exit_code(), 143) << ReadAll(log);  // 128 + SIGTERM, the job CANCELLED
  EXPECT_NE(ReadAll(log).find("terminated (SIGTERM); cancelling job"), std::string::npos)
      << ReadAll(log);
  EXPECT_FALSE(fs::exists(state)) << "the temporary state directory was left: " << state;
}

// The embedded coordinator serves the one local user: absolute paths go, as
// they do for `sbp train` (a shared coordinator confines them to the area).
TEST_F(RunCommandTest, AbsolutePathsRunAsForTrain) {
  Cluster& c = *cluster_;
  c.WriteSpec("abs", c.Spec("abs", 2, 2, 0));
  const fs::path elsewhere = fs::path(::testing::TempDir()) / "run_command_abs_run";
  fs::remove_all(elsewhere);
  const std::string sets = " --set model=" + (c.dir() / "model").string() +
                           " --set data=" + (c.dir() / "data.jsonl").string() +
                           " --set checkpoint.dir=" + elsewhere.string();
  const CommandResult r = RunCommand(SbpRun() + " abs.yaml" + sets, c.dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(elsewhere / "checkpoints/step-00000002/model.safetensors"));
  fs::remove_all(elsewhere);
}

TEST_F(RunCommandTest, RejectedSpecIsExitCodeTwo) {
  Cluster& c = *cluster_;
  c.WriteSpec("bad", c.Spec("bad", 3, 2, 0, "trian: {steps: 1}\n"));
  CommandResult r = RunCommand(SbpRun() + " bad.yaml", c.dir());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("trian"), std::string::npos) << r.err;
  r = RunCommand(SbpRun() + " missing.yaml", c.dir());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  // Bad data is found by the worker: the job fails as bad input, also exit code 2.
  WriteFile(c.dir() / "broken.jsonl", "{\"input_ids\": \"x\"}\n");
  std::string spec = c.Spec("broken", 3, 2, 0);
  spec.replace(spec.find("data.jsonl"), 10, "broken.jsonl");
  c.WriteSpec("broken", spec);
  r = RunCommand(SbpRun() + " broken.yaml", c.dir());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.out.find("FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("broken.jsonl"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace sbp::testing
