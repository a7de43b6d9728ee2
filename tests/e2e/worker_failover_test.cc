// SIGKILL the worker running a job while a second worker is idle: the lease
// expires, the job is retried on the other worker from its latest checkpoint
// (recomputing at most one checkpoint interval) and succeeds.
#include <gtest/gtest.h>

#include <regex>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

// Steps in metrics.jsonl, in file order.
std::vector<int64_t> MetricSteps(const std::string& path) {
  std::vector<int64_t> steps;
  std::istringstream in(ReadAll(path));
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) steps.push_back(j.value("step", int64_t{-1}));
  }
  return steps;
}

TEST(WorkerFailoverTest, RetriedOnTheIdleWorkerFromTheLatestCheckpoint) {
  constexpr int kSteps = 60, kEvery = 5;
  Cluster c("worker_failover");
  c.StartCoordinator(/*lease_seconds=*/2);
  c.StartWorker("w0");
  c.StartWorker("w1");
  ASSERT_TRUE(
      WaitFor([&] { return c.Sbp("workers").out.find("w1") != std::string::npos; }, seconds(20)));
  const std::string id = c.Submit(c.WriteSpec("failover", c.Spec("failover", kSteps, 64, kEvery)));
  ASSERT_TRUE(WaitFor([&] { return c.Step(id) >= kEvery + 2; }, seconds(30))) << c.Logs();

  // Which worker process runs it?
  const nlohmann::json job = c.GetJob(id);
  const std::string worker_id = job["worker_ids"][0];
  const auto workers = nlohmann::json::parse(c.Sbp("workers -o json").out, nullptr, false);
  std::string victim;
  for (const auto& w : workers["workers"]) {
    if (w["id"] == worker_id) victim = w["name"];
  }
  ASSERT_TRUE(victim == "w0" || victim == "w1") << workers.dump(1);
  c.worker(victim).Kill(SIGKILL);
  const std::string metrics_path = (c.dir() / "runs/failover/metrics.jsonl").string();
  const std::vector<int64_t> before = MetricSteps(metrics_path);
  ASSERT_FALSE(before.empty());
  const int64_t last_done = before.back();  // the last step the killed worker completed

  const CommandResult watch = c.Sbp("watch " + id);
  EXPECT_EQ(watch.exit_code, 0) << watch.err << c.Logs();
  EXPECT_NE(watch.err.find("RETRYING"), std::string::npos) << watch.err;
  const nlohmann::json final_job = c.GetJob(id);
  EXPECT_EQ(final_job["state"], "SUCCEEDED") << final_job.dump(1);
  EXPECT_EQ(final_job["attempt"], 2);
  EXPECT_NE(final_job["worker_ids"][0], worker_id);
  EXPECT_EQ(Cluster::Int(final_job["progress"]["step"]), kSteps);

  // Attempt 2 resumed from the latest checkpoint: recomputed steps <= one interval.
  const std::string events = c.Sbp("events " + id).out;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(events, m, std::regex("attempt 2 started .*resuming after step (\\d+)")))
      << events;
  const int64_t resumed_after = std::stoll(m[1]);
  EXPECT_EQ(resumed_after % kEvery, 0);
  EXPECT_LE(resumed_after, last_done);
  EXPECT_LE(last_done - resumed_after, kEvery) << "recomputed too much";
  // The run's metrics read as one clean run 1..kSteps.
  const std::vector<int64_t> after = MetricSteps(metrics_path);
  ASSERT_EQ(after.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(after[i], i + 1);
}

// SIGTERM: the worker finishes its step, checkpoints, reports the checkpoint
// and exits 0; when its lease expires the job moves to the other worker and
// recomputes nothing.
TEST(WorkerFailoverTest, SigtermHandsTheJobOverWithoutLosingSteps) {
  constexpr int kSteps = 40;
  Cluster c("worker_sigterm");
  c.StartCoordinator(/*lease_seconds=*/2);
  c.StartWorker("w0");
  c.StartWorker("w1");
  ASSERT_TRUE(
      WaitFor([&] { return c.Sbp("workers").out.find("w1") != std::string::npos; }, seconds(20)));
  const std::string id = c.Submit(c.WriteSpec("sigterm", c.Spec("sigterm", kSteps, 64, 100)));
  ASSERT_TRUE(WaitFor([&] { return c.Step(id) >= 3; }, seconds(30))) << c.Logs();
  const nlohmann::json job = c.GetJob(id);
  const auto workers = nlohmann::json::parse(c.Sbp("workers -o json").out, nullptr, false);
  std::string victim;
  for (const auto& w : workers["workers"]) {
    if (w["id"] == job["worker_ids"][0]) victim = w["name"];
  }
  ASSERT_FALSE(victim.empty());
  c.worker(victim).Kill(SIGTERM);
  EXPECT_EQ(c.worker(victim).exit_code(), 0) << c.Logs();
  const std::vector<int64_t> before =
      MetricSteps((c.dir() / "runs/sigterm/metrics.jsonl").string());
  ASSERT_FALSE(before.empty());

  const CommandResult watch = c.Sbp("watch " + id);
  EXPECT_EQ(watch.exit_code, 0) << watch.err << c.Logs();
  const nlohmann::json final_job = c.GetJob(id);
  EXPECT_EQ(final_job["attempt"], 2) << final_job.dump(1);
  EXPECT_EQ(final_job["failure_class"], "LOST_WORKER") << final_job.dump(1);
  const std::string events = c.Sbp("events " + id).out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(events, m, std::regex("resuming after step (\\d+)"))) << events;
  EXPECT_EQ(std::stoll(m[1]), before.back()) << "the stop checkpoint is the last step done";
  EXPECT_EQ(MetricSteps((c.dir() / "runs/sigterm/metrics.jsonl").string()).size(),
            static_cast<size_t>(kSteps));
}

}  // namespace
}  // namespace sbp::testing
