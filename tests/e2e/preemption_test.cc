// Preemption with real processes: a high-priority job submitted while a
// low-priority job holds the only worker runs within one step plus the
// grace; the low-priority job checkpoints at its step boundary, waits
// ("preempted by <job>"), resumes from that checkpoint and ends with the
// same weights, byte for byte, as an uninterrupted run. `sbp events` shows
// the preemption, sbp_job_preemptions_total counts it, and it is no restart.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;
namespace fs = std::filesystem;

constexpr int kSteps = 30;
constexpr int kGraceSeconds = 20;

// 512-token examples: a step of the tiny model takes long enough (tens of
// milliseconds) for the test to act between steps.
void WriteLongData(const fs::path& path) {
  std::mt19937 random(1);
  std::string text;
  for (int i = 0; i < 16; ++i) {
    std::string prompt, completion;
    for (int t = 0; t < 256; ++t) {
      absl::StrAppend(&prompt, t ? ", " : "", 4 + random() % 240);
      absl::StrAppend(&completion, t ? ", " : "", 4 + random() % 240);
    }
    absl::StrAppend(&text, "{\"prompt_ids\": [", prompt, "], \"completion_ids\": [", completion,
                    "]}\n");
  }
  WriteFile(path, text);
}

// The low-priority job; its run directory is runs/<job id>.
std::string LowSpec(const std::string& name, const std::string& extra = "") {
  return absl::StrCat("name: ", name,
                      "\nmodel: model\ndata: long.jsonl\nobjective: sft\nseq_len: 512\n"
                      "streambp: {mode: stream, chunk_tokens: 64, logits_chunk_tokens: 64}\n"
                      "train: {steps: ",
                      kSteps,
                      ", sequences_per_step: 16, lr: 1.0e-2}\n"
                      "checkpoint: {every_steps: 0}\nmax_restarts: 0\npriority: 0\n",
                      extra);
}

// The value of an unlabelled metric on the /metrics page ("" when absent).
std::string MetricValue(const std::string& page, const std::string& name) {
  const std::regex line("\n" + name + " ([0-9.e+-]+)");
  std::smatch m;
  return std::regex_search(page, m, line) ? m[1].str() : "";
}

TEST(PreemptionTest, HighPriorityJobTakesTheWorkerAndTheLowOneResumesBitForBit) {
  Cluster c("preemption");
  WriteLongData(c.dir() / "long.jsonl");
  const int metrics_port = FreePort();
  c.StartCoordinator(3, {"--preemption-grace", std::to_string(kGraceSeconds), "--metrics-listen",
                         absl::StrCat("127.0.0.1:", metrics_port)});
  c.StartWorker("w0");
  ASSERT_TRUE(
      WaitFor([&] { return c.Sbp("workers").out.find("w0") != std::string::npos; }, seconds(20)));

  // The uninterrupted run.
  const std::string straight = c.Submit(c.WriteSpec("straight", LowSpec("straight")));
  ASSERT_EQ(c.Sbp("watch " + straight).exit_code, 0) << c.Logs();

  // The same job, preempted a few steps in.
  const std::string low = c.Submit(c.WriteSpec("low", LowSpec("low")));
  ASSERT_TRUE(WaitFor([&] { return c.Step(low) >= 3; }, seconds(60))) << c.Logs();
  const double step_seconds = c.GetJob(low)["progress"].value("step_seconds", 0.0);
  const auto submitted = std::chrono::steady_clock::now();
  const std::string high = c.Submit(c.WriteSpec("high", c.Spec("high", 2, 2, 0, "priority: 10\n")));
  ASSERT_FALSE(high.empty());
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string state = c.State(high);
        return state == "SCHEDULED" || state == "RUNNING" || state == "SUCCEEDED";
      },
      seconds(kGraceSeconds + 30)))
      << c.Logs();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted).count();
  // Within one step plus the grace (and a few seconds of polling and process start).
  EXPECT_LE(waited, step_seconds + kGraceSeconds + 5) << c.Logs();
  EXPECT_NE(c.Step(low), kSteps) << "the low-priority job finished before it was preempted";

  // While the high-priority job runs, the low one waits and says why.
  const nlohmann::json waiting = c.GetJob(low);
  if (waiting.value("state", "") == "PENDING") {
    EXPECT_NE(waiting.value("reason", "").find("preempted by " + high), std::string::npos)
        << waiting.dump(1);
  }
  EXPECT_EQ(c.Sbp("watch " + high).exit_code, 0) << c.Logs();
  EXPECT_EQ(c.Sbp("watch " + low).exit_code, 0) << c.Logs();

  // Same final weights as the uninterrupted run, byte for byte.
  auto weights = [&](const std::string& id) {
    return ReadAll((c.dir() / "runs" / id /
                    absl::StrCat("checkpoints/step-000000", kSteps, "/model.safetensors"))
                       .string());
  };
  EXPECT_FALSE(weights(straight).empty());
  EXPECT_TRUE(weights(straight) == weights(low)) << "the preempted run's weights differ";

  // The events show the preemption: requested, then a checkpoint at a step
  // boundary, back to PENDING, and the next attempt resumes after that step
  // (at most the step in progress is lost).
  const std::string events = c.Sbp("events " + low).out;
  EXPECT_NE(events.find("preempted by higher-priority job " + high), std::string::npos) << events;
  std::smatch stopped;
  ASSERT_TRUE(std::regex_search(events, stopped, std::regex("stopped after step ([0-9]+)")))
      << events;
  EXPECT_NE(events.find("resuming after step " + stopped[1].str()), std::string::npos) << events;
  EXPECT_EQ(events.find("did not checkpoint within"), std::string::npos) << events;
  EXPECT_EQ(events.find("restarting"), std::string::npos) << events;

  // Not a restart: two attempts, one preemption, the restart counter untouched.
  const nlohmann::json job = c.GetJob(low);
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED");
  EXPECT_EQ(job.value("attempt", 0), 2) << job.dump(1);
  EXPECT_EQ(job.value("preemptions", 0), 1) << job.dump(1);
  EXPECT_NE(c.Sbp("get " + low).out.find("preempted 1 time"), std::string::npos);
  const std::string page = HttpGet(metrics_port, "/metrics");
  EXPECT_EQ(MetricValue(page, "sbp_job_preemptions_total"), "1") << page;
  EXPECT_EQ(MetricValue(page, "sbp_job_restarts_total"), "0") << page;
}

// A ZeRO-2 job of two ranks: both stop at the same step (the ranks agree on
// every stop), each writes its optimizer shard, both finish PREEMPTED, and
// the resumed job again equals an uninterrupted run byte for byte.
TEST(PreemptionTest, BothRanksOfAZero2JobStopAtTheSameStep) {
  Cluster c("preemption_zero2");
  WriteLongData(c.dir() / "long.jsonl");
  c.StartCoordinator(3, {"--preemption-grace", std::to_string(kGraceSeconds)});
  c.StartWorker("w0");
  c.StartWorker("w1");
  ASSERT_TRUE(
      WaitFor([&] { return c.Sbp("workers").out.find("w1") != std::string::npos; }, seconds(20)));
  const std::string zero2 = "resources: {world_size: 2, device: cpu}\n";
  const std::string straight = c.Submit(c.WriteSpec("straight", LowSpec("straight", zero2)));
  ASSERT_EQ(c.Sbp("watch " + straight).exit_code, 0) << c.Logs();

  const std::string low = c.Submit(c.WriteSpec("low", LowSpec("low", zero2)));
  ASSERT_TRUE(WaitFor([&] { return c.Step(low) >= 3; }, seconds(60))) << c.Logs();
  const std::string high = c.Submit(c.WriteSpec("high", c.Spec("high", 2, 2, 0, "priority: 10\n")));
  EXPECT_EQ(c.Sbp("watch " + high).exit_code, 0) << c.Logs();
  EXPECT_EQ(c.Sbp("watch " + low).exit_code, 0) << c.Logs();

  const std::string events = c.Sbp("events " + low).out;
  std::smatch stopped;
  ASSERT_TRUE(std::regex_search(events, stopped, std::regex("stopped after step ([0-9]+)")))
      << events << c.Logs();
  EXPECT_NE(events.find("resuming after step " + stopped[1].str()), std::string::npos) << events;
  EXPECT_EQ(events.find("did not checkpoint within"), std::string::npos) << events;
  const auto checkpoint = c.dir() / "runs" / low /
                          absl::StrCat("checkpoints/step-",
                                       std::string(8 - stopped[1].length(), '0'), stopped[1].str());
  EXPECT_TRUE(fs::exists(checkpoint / "trainer_state/optimizer-rank-00001-of-00002.safetensors"))
      << checkpoint;
  auto weights = [&](const std::string& id) {
    return ReadAll((c.dir() / "runs" / id /
                    absl::StrCat("checkpoints/step-000000", kSteps, "/model.safetensors"))
                       .string());
  };
  EXPECT_FALSE(weights(straight).empty());
  EXPECT_TRUE(weights(straight) == weights(low)) << "the preempted run's weights differ";
  EXPECT_EQ(c.GetJob(low).value("preemptions", 0), 1);
}

}  // namespace
}  // namespace sbp::testing
