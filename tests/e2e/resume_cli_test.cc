// One resume rule for `sbp train`, `sbp run` and `sbp submit`, as a user
// meets it: interrupt a run (Ctrl-C, SIGTERM, `sbp cancel`), then continue it
// with --resume. The run stays one directory with one continuous
// metrics.jsonl, the weights equal an uninterrupted run's bit for bit, the
// checkpoint the job reports is the newest on disk, and a command without
// --resume starts a new run and names the flag.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <regex>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

constexpr char kName[] = "resumable";

// A constant learning rate, so that a run of any length follows the same
// trajectory: the interrupted run asks for many steps, the comparisons for
// a few past where it stopped (steps are not part of a run's identity).
std::string SpecText(const Cluster& c, int steps) {
  std::string spec = c.Spec(kName, steps, 2, 0);
  spec.replace(spec.find(", dir: runs/resumable"), 21, "");  // one run directory per run
  return spec;
}

std::vector<nlohmann::json> MetricLines(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(ReadAll(path.string()));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return lines;
}

// The steps of a run's metrics.jsonl, in order.
std::vector<int64_t> Steps(const fs::path& run) {
  std::vector<int64_t> steps;
  for (const nlohmann::json& line : MetricLines(run / "metrics.jsonl")) {
    steps.push_back(line.value("step", -1));
  }
  return steps;
}

std::vector<int64_t> OneTo(int64_t n) {
  std::vector<int64_t> steps;
  for (int64_t s = 1; s <= n; ++s) steps.push_back(s);
  return steps;
}

std::string Weights(const fs::path& run, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return ReadAll((run / "checkpoints" / name / "model.safetensors").string());
}

// The newest checkpoint directory on disk (by step), "" when none.
std::string NewestCheckpointOnDisk(const fs::path& run) {
  std::string newest;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run / "checkpoints", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0 && entry.is_directory() && name > newest) newest = name;
  }
  return newest;
}

// The run directories of job `kName` under runs/, other than `except`.
std::vector<fs::path> RunDirs(const Cluster& c) {
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(c.dir() / "runs")) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// Starts `sbp ARGS` in the scratch directory, waits until its run has
// written `min_steps` metrics lines, sends `signal` and returns the step the
// run stopped at (its metrics' last line) and the run directory.
std::pair<int64_t, fs::path> InterruptedRun(Cluster& c, const std::vector<std::string>& args,
                                            int signal, int min_steps) {
  std::vector<std::string> argv = {SbpBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  Process sbp(argv, c.dir(), c.dir() / "interrupted.log", {{"OMP_NUM_THREADS", "1"}});
  fs::path run;
  EXPECT_TRUE(WaitFor(
      [&] {
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(c.dir() / "runs", ec)) {
          if (MetricLines(entry.path() / "metrics.jsonl").size() >= size_t(min_steps)) {
            run = entry.path();
            return true;
          }
        }
        return false;
      },
      seconds(60)))
      << ReadAll((c.dir() / "interrupted.log").string());
  sbp.Kill(signal);
  EXPECT_EQ(sbp.exit_code(), 128 + signal) << ReadAll((c.dir() / "interrupted.log").string());
  const std::vector<int64_t> steps = Steps(run);
  return {steps.empty() ? 0 : steps.back(), run};
}

class ResumeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<Cluster>(
        std::string("resume_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(ResumeCliTest, TrainInterruptedThenResumed) {
  Cluster& c = *cluster_;
  c.WriteSpec("long", SpecText(c, 100000));
  const auto [stopped, run] = InterruptedRun(c, {"train", "long.yaml"}, SIGINT, 3);
  ASSERT_GE(stopped, 3);
  const std::string log = ReadAll((c.dir() / "interrupted.log").string());
  // Where it stopped: printed and recorded, and it is the newest checkpoint.
  EXPECT_NE(log.find("stopped after step " + std::to_string(stopped) + " (interrupted)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("--resume " + run.lexically_relative(c.dir()).string()), std::string::npos)
      << log;
  char newest[32];
  std::snprintf(newest, sizeof(newest), "step-%08lld", static_cast<long long>(stopped));
  EXPECT_EQ(NewestCheckpointOnDisk(run), newest);
  EXPECT_NE(ReadAll((run / "run.json").string()).find("\"how\":\"interrupted\""),
            std::string::npos);

  // --resume with no argument: the newest run of the job's name, in place.
  const int64_t until = stopped + 3;
  c.WriteSpec("short", SpecText(c, until));
  // (--set: the same spec file, asking for fewer steps.)
  CommandResult r = RunCommand(
      SbpBinary() + " train long.yaml --resume --set train.steps=" + std::to_string(until),
      c.dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(RunDirs(c), std::vector<fs::path>{run});
  EXPECT_EQ(Steps(run), OneTo(until));

  // Without --resume: a new run, and one line naming the run and the flag.
  r = RunCommand(SbpBinary() + " train short.yaml", c.dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("not resuming " + run.lexically_relative(c.dir()).string()),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--resume continues it"), std::string::npos) << r.err;
  const std::vector<fs::path> runs = RunDirs(c);
  ASSERT_EQ(runs.size(), 2u);
  const fs::path straight = runs[0] == run ? runs[1] : runs[0];
  EXPECT_EQ(Steps(straight), OneTo(until));
  ASSERT_FALSE(Weights(straight, until).empty());
  EXPECT_EQ(Weights(straight, until), Weights(run, until));

  // A finished run resumed: nothing to train, said plainly.
  r = RunCommand(SbpBinary() + " train short.yaml --resume " + run.string(), c.dir());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("already finished at step " + std::to_string(until)), std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("\"final_loss\":"), std::string::npos);
  EXPECT_EQ(r.out.find("\"final_loss\":0.0"), std::string::npos) << r.out;
}

TEST_F(ResumeCliTest, RunTerminatedThenResumed) {
  Cluster& c = *cluster_;
  c.WriteSpec("long", SpecText(c, 100000));
  const auto [stopped, run] = InterruptedRun(c, {"run", "long.yaml"}, SIGTERM, 3);
  ASSERT_GE(stopped, 3);
  const std::string log = ReadAll((c.dir() / "interrupted.log").string());
  // The checkpoint the job reports is the newest on disk, at the step it stopped.
  const std::string newest = NewestCheckpointOnDisk(run);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("last step (\\d+), last checkpoint (\\S+);")))
      << log;
  EXPECT_EQ(std::stoll(m[1].str()), stopped);
  EXPECT_EQ(fs::path(m[2].str()).filename().string(), newest) << log;
  EXPECT_NE(log.find("--resume " + run.lexically_relative(c.dir()).string()), std::string::npos)
      << log;

  const int64_t until = stopped + 3;
  c.WriteSpec("short", SpecText(c, until));
  CommandResult r = RunCommand(SbpBinary() + " run short.yaml --resume", c.dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(RunDirs(c), std::vector<fs::path>{run});
  EXPECT_EQ(Steps(run), OneTo(until));

  r = RunCommand(SbpBinary() + " run short.yaml", c.dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--resume continues it"), std::string::npos) << r.err;
  const std::vector<fs::path> runs = RunDirs(c);
  ASSERT_EQ(runs.size(), 2u);
  const fs::path straight = runs[0] == run ? runs[1] : runs[0];
  ASSERT_FALSE(Weights(straight, until).empty());
  EXPECT_EQ(Weights(straight, until), Weights(run, until));
}

TEST_F(ResumeCliTest, SubmitCancelledThenResumed) {
  Cluster& c = *cluster_;
  c.StartCoordinator();
  c.StartWorker("w0");
  ASSERT_TRUE(
      WaitFor([&] { return c.Sbp("workers").out.find("w0") != std::string::npos; }, seconds(20)));
  const std::string id = c.Submit(c.WriteSpec("long", SpecText(c, 100000)));
  ASSERT_TRUE(WaitFor([&] { return c.Step(id) >= 3; }, seconds(60))) << c.Logs();

  // Resuming a job that still runs is refused.
  CommandResult r = c.Sbp("submit long.yaml --resume " + id);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("is RUNNING"), std::string::npos) << r.err;

  ASSERT_EQ(c.Sbp("cancel " + id).exit_code, 0);
  // `sbp get` settles on what the worker committed: its last step and the
  // newest checkpoint on disk, also named in the job's events.
  nlohmann::json job;
  ASSERT_TRUE(WaitFor(
      [&] {
        job = c.GetJob(id);
        return job.is_object() && !job.value("stopping", false);
      },
      seconds(30)));
  const fs::path run = c.dir() / job.value("run_dir", "");
  EXPECT_EQ(job.value("run_dir", ""), "runs/" + id);
  const std::string newest = NewestCheckpointOnDisk(run);
  ASSERT_FALSE(newest.empty());
  EXPECT_EQ(fs::path(job.value("last_checkpoint", "")).filename().string(), newest) << job.dump(1);
  const int64_t stopped = Cluster::Int(job["progress"]["step"]);
  EXPECT_EQ(Steps(run).back(), stopped);
  EXPECT_EQ(newest, "step-" + std::string(8 - std::to_string(stopped).size(), '0') +
                        std::to_string(stopped));
  const std::string events = c.Sbp("events " + id).out;
  EXPECT_NE(events.find(newest), std::string::npos) << events;

  // --resume ID continues the same run directory; the straight job matches it.
  const int64_t until = stopped + 3;
  c.WriteSpec("short", SpecText(c, until));
  r = c.Sbp("submit long.yaml --watch --set train.steps=" + std::to_string(until) + " --resume " +
            id);
  ASSERT_EQ(r.exit_code, 0) << r.err << c.Logs();
  EXPECT_EQ(Steps(run), OneTo(until));
  r = c.Sbp("submit short.yaml --watch");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("not resuming job "), std::string::npos) << r.err;
  const std::string straight_id = r.out.substr(0, r.out.find('\n'));
  const fs::path straight = c.dir() / "runs" / straight_id;
  ASSERT_FALSE(Weights(straight, until).empty()) << straight;
  EXPECT_EQ(Weights(straight, until), Weights(run, until));
}

// `sbp submit --watch` detaches on Ctrl-C and says how to come back;
// --cancel-on-interrupt cancels instead, and the job checkpoints where it stops.
TEST_F(ResumeCliTest, SubmitWatchDetachesOrCancelsOnInterrupt) {
  Cluster& c = *cluster_;
  c.StartCoordinator();
  c.StartWorker("w0");
  c.WriteSpec("long", SpecText(c, 100000));
  const std::vector<std::string> submit = {SbpBinary(),    "--coordinator", c.address(),
                                           "--token-file", "client.token",  "submit",
                                           "long.yaml"};
  auto watched = [&](const std::string& flag, int signal, const std::string& log) {
    std::vector<std::string> argv = submit;
    argv.push_back(flag);
    Process sbp(argv, c.dir(), c.dir() / log);
    std::string id;
    EXPECT_TRUE(WaitFor(
        [&] {
          // The id is stdout's line; stderr shares the log.
          const std::string text = ReadAll((c.dir() / log).string());
          std::smatch m;
          if (!std::regex_search(text, m, std::regex("(^|\n)(resumable-[a-z0-9]+)\n")))
            return false;
          id = m[2].str();
          return c.Step(id) >= 2;
        },
        seconds(60)))
        << ReadAll((c.dir() / log).string()) << c.Logs();
    sbp.Kill(signal);
    EXPECT_EQ(sbp.exit_code(), 128 + signal) << ReadAll((c.dir() / log).string());
    return id;
  };
  const std::string detached = watched("--watch", SIGINT, "detach.log");
  EXPECT_NE(ReadAll((c.dir() / "detach.log").string())
                .find("`sbp watch " + detached + "` follows it again"),
            std::string::npos);
  EXPECT_EQ(c.State(detached), "RUNNING");
  ASSERT_EQ(c.Sbp("cancel " + detached).exit_code, 0);

  const std::string cancelled = watched("--cancel-on-interrupt", SIGTERM, "cancel.log");
  EXPECT_EQ(c.State(cancelled), "CANCELLED");
  const nlohmann::json job = c.GetJob(cancelled);
  EXPECT_FALSE(job.value("stopping", false));
  EXPECT_EQ(fs::path(job.value("last_checkpoint", "")).filename().string(),
            NewestCheckpointOnDisk(c.dir() / "runs" / cancelled))
      << job.dump(1);
}

}  // namespace
}  // namespace sbp::testing
