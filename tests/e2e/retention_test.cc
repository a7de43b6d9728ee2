// Stored history is bounded: ended jobs are removed from the database past
// the retention policy (here: 2 s after they ended, checked every second),
// with their events, while run directories stay; and a user's stored specs
// are capped at submit, the cap freed again as retention removes jobs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

TEST(RetentionTest, EndedJobsLeaveTheDatabaseAndFreeTheSpecCap) {
  Cluster c("retention");
  c.StartCoordinator(3, {"--retain-finished", "2s", "--retention-interval", "1s",
                         "--max-spec-bytes-per-user", "4KiB"});
  // Each spec is stored as YAML and JSON, about 1 KiB together: a few fit.
  std::vector<std::string> ids;
  CommandResult refused;
  for (int i = 0; i < 10; ++i) {
    const std::string name = absl::StrCat("kept-", i);
    const CommandResult r = c.Sbp("submit -o json " + c.WriteSpec(name, c.Spec(name, 10, 2, 0)));
    if (r.exit_code != 0) {
      refused = r;
      break;
    }
    ids.push_back(nlohmann::json::parse(r.out).value("id", ""));
  }
  ASSERT_GE(ids.size(), 2u);
  ASSERT_LT(ids.size(), 10u) << "the spec cap never refused";
  EXPECT_NE(refused.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--max-spec-bytes-per-user"), std::string::npos) << refused.err;

  // Pending jobs are kept whatever their age; cancelled ones go 2 s later.
  std::this_thread::sleep_for(seconds(3));
  ASSERT_TRUE(c.GetJob(ids[0]).is_object()) << "a pending job was removed";
  for (const std::string& id : ids) ASSERT_EQ(c.Sbp("cancel " + id).exit_code, 0);
  std::filesystem::create_directories(c.dir() / "runs" / ids[0]);  // a run directory stays
  ASSERT_TRUE(WaitFor(
      [&] {
        const CommandResult list = c.Sbp("list --limit 0 -o json");
        const auto j = nlohmann::json::parse(list.out, nullptr, false);
        return j.is_object() && (!j.contains("jobs") || j["jobs"].empty());
      },
      seconds(15)))
      << c.Sbp("list").out << c.Logs();
  EXPECT_NE(c.Sbp("get " + ids[0]).err.find("no job with id"), std::string::npos);
  EXPECT_NE(c.Sbp("events " + ids[0]).err.find("no job with id"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(c.dir() / "runs" / ids[0]));
  EXPECT_NE(ReadAll((c.dir() / "coordinator.log").string()).find("retention removed"),
            std::string::npos);
  // The cap is free again.
  const CommandResult again = c.Sbp("submit " + c.WriteSpec("after", c.Spec("after", 10, 2, 0)));
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

TEST(RetentionTest, BadPolicyFlagsAreRefused) {
  Cluster c("retention_flags");
  const CommandResult r = RunCommand(BinaryDir() +
                                         "/bin/sbp-coordinator --db c.db "
                                         "--retain-finished 30 --listen 127.0.0.1:0",
                                     c.dir());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--retain-finished: expected an age like 30d"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sbp::testing
