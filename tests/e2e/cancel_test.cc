// A cancel reaches a step in progress: with 2^20 sequences a step of the
// tiny model takes about an hour, and the cancelled job's worker must be
// idle again within 10 s (it held its worker, outside the quota, for the
// whole step before), with the job CANCELLED.
#include <gtest/gtest.h>

#include <chrono>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

TEST(CancelTest, ACancelInsideAMillionSequenceStepFreesTheWorkerWithinTenSeconds) {
  Cluster c("cancel_in_step");
  c.StartCoordinator(/*lease_seconds=*/3);
  c.StartWorker("w0");
  const std::string id = c.Submit(c.WriteSpec("huge", c.Spec("huge", 2, 1 << 20, 0)));
  auto worker_state = [&] {
    const auto j = nlohmann::json::parse(c.Sbp("workers -o json").out, nullptr, false);
    if (!j.is_object() || !j.contains("workers") || j["workers"].empty()) return std::string();
    return j["workers"][0].value("state", "");
  };
  ASSERT_TRUE(WaitFor([&] { return c.State(id) == "RUNNING"; }, seconds(30))) << c.Logs();
  ASSERT_TRUE(WaitFor([&] { return worker_state() == "busy"; }, seconds(10))) << c.Logs();
  std::this_thread::sleep_for(seconds(3));  // well inside the first step
  ASSERT_EQ(c.Step(id), 0) << "the first step should still be running";
  const auto cancelled_at = std::chrono::steady_clock::now();
  const CommandResult cancel = c.Sbp("cancel " + id);
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  ASSERT_TRUE(WaitFor([&] { return worker_state() == "idle"; }, seconds(20))) << c.Logs();
  const auto freed = std::chrono::steady_clock::now() - cancelled_at;
  EXPECT_LE(freed, seconds(10)) << "the worker was busy "
                                << std::chrono::duration<double>(freed).count()
                                << " s after the cancel";
  EXPECT_EQ(c.State(id), "CANCELLED");
  EXPECT_TRUE(c.worker("w0").running());
  EXPECT_NE(ReadAll((c.dir() / "w0.log").string()).find("abandon"), std::string::npos) << c.Logs();
}

}  // namespace
}  // namespace sbp::testing
