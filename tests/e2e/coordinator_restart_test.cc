// SIGKILL the coordinator in the middle of a job and restart it on the same
// SQLite file: the worker keeps training, reconnects, and the job finishes;
// every job and every event recorded before the crash is still there.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <thread>
#include <utility>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

nlohmann::json Json(const CommandResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out, nullptr, false);
}

TEST(CoordinatorRestartTest, JobFinishesAndNothingIsLost) {
  Cluster c("coordinator_restart");
  c.StartCoordinator(/*lease_seconds=*/5);
  c.StartWorker("w0");
  const std::string done_id = c.Submit(c.WriteSpec("early", c.Spec("early", 2, 2, 0)));
  ASSERT_TRUE(WaitFor([&] { return c.State(done_id) == "SUCCEEDED"; }, seconds(30))) << c.Logs();
  const std::string id = c.Submit(c.WriteSpec("restart", c.Spec("restart", 100, 64, 10)));
  ASSERT_TRUE(WaitFor([&] { return c.Step(id) >= 5; }, seconds(30))) << c.Logs();

  const nlohmann::json jobs_before = Json(c.Sbp("list --limit 0 -o json"));
  const nlohmann::json events_before = Json(c.Sbp("events " + id + " -o json"));
  const nlohmann::json done_events_before = Json(c.Sbp("events " + done_id + " -o json"));
  c.KillCoordinator(SIGKILL);
  const int64_t metrics_lines_at_kill = [&] {
    const std::string m = ReadAll((c.dir() / "runs/restart/metrics.jsonl").string());
    return static_cast<int64_t>(std::count(m.begin(), m.end(), '\n'));
  }();
  std::this_thread::sleep_for(seconds(1));
  c.StartCoordinator(/*lease_seconds=*/5);

  // `sbp watch` follows it to the end through the restarted coordinator.
  const CommandResult watch = c.Sbp("watch " + id);
  EXPECT_EQ(watch.exit_code, 0) << watch.err << c.Logs();
  const nlohmann::json job = c.GetJob(id);
  ASSERT_TRUE(job.is_object());
  EXPECT_EQ(job["state"], "SUCCEEDED") << job.dump(1);
  EXPECT_EQ(job["attempt"], 1) << "the job should continue, not restart: " << job.dump(1);
  EXPECT_EQ(Cluster::Int(job["progress"]["step"]), 100);
  EXPECT_TRUE(c.worker("w0").running());  // the worker rode it out
  // It kept training while the coordinator was away.
  const std::string metrics = ReadAll((c.dir() / "runs/restart/metrics.jsonl").string());
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 100);
  EXPECT_GE(metrics_lines_at_kill, 5);

  // No job lost.
  const nlohmann::json jobs_after = Json(c.Sbp("list --limit 0 -o json"));
  std::set<std::string> before_ids, after_ids;
  for (const auto& j : jobs_before["jobs"]) before_ids.insert(j["id"].get<std::string>());
  for (const auto& j : jobs_after["jobs"]) after_ids.insert(j["id"].get<std::string>());
  EXPECT_EQ(before_ids, after_ids);
  // No event lost: what was recorded before the crash is a prefix of the history now.
  for (const auto& [jid, before] :
       {std::pair{id, events_before}, std::pair{done_id, done_events_before}}) {
    const nlohmann::json after = Json(c.Sbp("events " + jid + " -o json"));
    ASSERT_GE(after["events"].size(), before["events"].size());
    for (size_t i = 0; i < before["events"].size(); ++i) {
      EXPECT_EQ(after["events"][i], before["events"][i]) << jid << " event " << i;
    }
  }
  const nlohmann::json done = c.GetJob(done_id);
  EXPECT_EQ(done["state"], "SUCCEEDED");
}

// A coordinator restarted with a shorter lease: its running workers adopt
// it from the next heartbeat's answer (not at their next Register), so when
// that coordinator dies too, they stop writing within the new lease.
TEST(CoordinatorRestartTest, ALeaseChangeReachesRunningWorkersInOneHeartbeat) {
  Cluster c("lease_change");
  c.StartCoordinator(/*lease_seconds=*/30);
  c.StartWorker("w0");
  const std::string id = c.Submit(c.WriteSpec("lease", c.Spec("lease", 1000000, 64, 0)));
  ASSERT_TRUE(WaitFor([&] { return c.Step(id) >= 2; }, seconds(30))) << c.Logs();
  c.KillCoordinator(SIGKILL);
  std::this_thread::sleep_for(seconds(1));
  c.StartCoordinator(/*lease_seconds=*/4);
  // One heartbeat: every 10 s under the old 30 s lease.
  const std::string log = (c.dir() / "w0.log").string();
  ASSERT_TRUE(WaitFor(
      [&] { return ReadAll(log).find("the coordinator's lease is now 4 s") != std::string::npos; },
      seconds(15)))
      << c.Logs();
  ASSERT_TRUE(WaitFor([&] { return c.Step(id) >= 3; }, seconds(10))) << c.Logs();
  c.KillCoordinator(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const std::string metrics = (c.dir() / "runs/lease/metrics.jsonl").string();
  auto lines = [&] {
    const std::string m = ReadAll(metrics);
    return std::count(m.begin(), m.end(), '\n');
  };
  // Within the new lease (less its quarter of margin) and a step, nothing
  // more is written; under the old lease it would go on for 20 s.
  std::this_thread::sleep_until(killed + seconds(5));
  const auto at_five = lines();
  std::this_thread::sleep_until(killed + seconds(12));
  EXPECT_EQ(lines(), at_five) << "the worker kept writing after its 4 s lease lapsed";
  EXPECT_TRUE(c.worker("w0").running());
}

}  // namespace
}  // namespace sbp::testing
