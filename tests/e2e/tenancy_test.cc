// A coordinator shared by several users, with real processes: a users file
// (token hashes, roles, quotas), ownership (another user's job is NOT_FOUND,
// an admin sees all), quotas at submit and in the scheduler, a token removed
// from the file locking its user out within seconds while running jobs go
// on, and no coordinator listening open off loopback.
#include <gtest/gtest.h>

#include "server/identity.h"
#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

std::string UsersFile(bool with_bob) {
  using server::TokenSha256;
  std::string text = absl::StrCat(
      "users:\n"
      "  - name: alice\n    role: user\n    token_sha256: [",
      TokenSha256("alice-secret"),
      "]\n    quota: {max_running_workers: 1, max_pending_jobs: 2, max_priority: 5}\n");
  if (with_bob) {
    absl::StrAppend(&text, "  - name: bob\n    token_sha256: [", TokenSha256("bob-secret"), "]\n");
  }
  absl::StrAppend(&text, "  - name: ops\n    role: admin\n    token_sha256: [",
                  TokenSha256("ops-secret"), "]\nworkers:\n  - name: pool\n    token_sha256: [",
                  TokenSha256("worker-secret"), "]\n");
  return text;
}

class TenancyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    c_ = std::make_unique<Cluster>("tenancy");
    for (const char* who : {"alice", "bob", "ops"}) {
      WriteFile(c_->dir() / absl::StrCat(who, ".token"), absl::StrCat(who, "-secret\n"));
    }
    WriteFile(c_->dir() / "users.yaml", UsersFile(true));
    coordinator_ = std::make_unique<Process>(
        std::vector<std::string>{BinaryDir() + "/bin/sbp-coordinator", "--listen", c_->address(),
                                 "--db", (c_->dir() / "coordinator.db").string(), "--users",
                                 (c_->dir() / "users.yaml").string(), "--lease-seconds", "3",
                                 "--work-dir", c_->dir().string()},
        c_->dir(), c_->dir() / "coordinator.log");
    ASSERT_TRUE(WaitFor([&] { return As("alice", "whoami").exit_code == 0; }, seconds(20)))
        << ReadAll((c_->dir() / "coordinator.log").string());
  }
  CommandResult As(const std::string& who, const std::string& args) {
    return c_->Sbp(args, who + ".token");
  }
  // A spec without checkpoint.dir: its run directory is <user>/runs/<job id>.
  std::string SpecOf(const std::string& name, int steps, const std::string& extra = "") {
    std::string spec = c_->Spec(name, steps, 2, 0, extra);
    spec.replace(spec.find(", dir: runs/" + name), 12 + name.size(), "");
    return spec;
  }
  std::string SubmitAs(const std::string& who, const std::string& name, int steps = 1000000) {
    const CommandResult r = As(who, "submit -o json " + c_->WriteSpec(name, SpecOf(name, steps)));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto job = nlohmann::json::parse(r.out, nullptr, false);
    return job.is_object() ? job.value("id", "") : "";
  }
  // The job's step as an admin sees it (-1: unknown).
  int64_t StepOf(const std::string& id) {
    const auto j = nlohmann::json::parse(As("ops", "get -o json " + id).out, nullptr, false);
    if (!j.is_object() || !j.contains("progress")) return -1;
    return Cluster::Int(j["progress"]["step"]);
  }
  std::unique_ptr<Cluster> c_;
  std::unique_ptr<Process> coordinator_;
};

TEST_F(TenancyTest, EachUserSeesOnlyTheirOwnJobsAndAnAdminSeesAll) {
  EXPECT_NE(As("alice", "whoami").out.find("alice (user)"), std::string::npos);
  EXPECT_NE(As("ops", "whoami").out.find("ops (admin)"), std::string::npos);
  const std::string id = SubmitAs("alice", "mine");
  ASSERT_FALSE(id.empty());
  for (const std::string verb : {"get ", "events ", "cancel ", "watch "}) {
    const CommandResult r = As("bob", verb + id);
    EXPECT_NE(r.exit_code, 0) << verb;
    EXPECT_NE(r.err.find("no job with id"), std::string::npos) << verb << r.err;
  }
  EXPECT_EQ(As("ops", "get " + id).exit_code, 0);
  EXPECT_EQ(As("bob", "list").out.find(id), std::string::npos);
  EXPECT_NE(As("alice", "list").out.find(id), std::string::npos);
  EXPECT_NE(As("ops", "list --user alice").out.find(id), std::string::npos);
  EXPECT_EQ(As("ops", "list --user bob").out.find(id), std::string::npos);
  EXPECT_NE(As("bob", "list --user alice").exit_code, 0);
  const auto job = nlohmann::json::parse(As("alice", "get -o json " + id).out, nullptr, false);
  EXPECT_EQ(job.value("owner", ""), "alice") << job.dump();
}

TEST_F(TenancyTest, QuotasRefuseAtSubmitAndHoldBackTheScheduler) {
  c_->StartWorker("w0");
  c_->StartWorker("w1");
  ASSERT_TRUE(WaitFor([&] { return As("ops", "workers").out.find("w1") != std::string::npos; },
                      seconds(20)));
  // One running worker at most: the second job waits, and says why.
  const std::string first = SubmitAs("alice", "first");
  ASSERT_TRUE(WaitFor(
      [&] {
        return c_->GetJob(first).is_null() ||
               As("alice", "get " + first).out.find("RUNNING") != std::string::npos;
      },
      seconds(30)));
  const std::string second = SubmitAs("alice", "second");
  ASSERT_TRUE(WaitFor(
      [&] {
        return As("alice", "get " + second).out.find("quota: alice runs 1 of 1 worker") !=
               std::string::npos;
      },
      seconds(20)))
      << As("alice", "get " + second).out;
  // Two pending jobs at most.
  SubmitAs("alice", "third");
  const CommandResult refused =
      As("alice", "submit " + c_->WriteSpec("fourth", SpecOf("fourth", 10)));
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("quota max_pending_jobs: alice has 2 of 2 jobs waiting"),
            std::string::npos)
      << refused.err;
  // A priority above the ceiling.
  const CommandResult high =
      As("alice", "submit " + c_->WriteSpec("high", c_->Spec("high", 10, 2, 0, "priority: 50\n")));
  EXPECT_NE(high.exit_code, 0);
  EXPECT_NE(high.err.find("above alice's ceiling of 5"), std::string::npos) << high.err;
}

TEST_F(TenancyTest, ARemovedTokenLocksItsUserOutWithinSeconds) {
  c_->StartWorker("w0");
  ASSERT_TRUE(WaitFor([&] { return As("ops", "workers").out.find("w0") != std::string::npos; },
                      seconds(20)));
  const std::string running = SubmitAs("bob", "long");
  ASSERT_TRUE(WaitFor([&] { return StepOf(running) >= 1; }, seconds(30))) << c_->Logs();
  ASSERT_EQ(As("bob", "whoami").exit_code, 0);
  WriteFile(c_->dir() / "users.yaml.new", UsersFile(false));
  std::filesystem::rename(c_->dir() / "users.yaml.new", c_->dir() / "users.yaml");
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] { return As("bob", "whoami").exit_code != 0; }, seconds(5)));
  EXPECT_LE(std::chrono::steady_clock::now() - start, seconds(5));
  EXPECT_NE(As("bob", "whoami").err.find("invalid token"), std::string::npos);
  // Bob's job keeps running (an admin sees it advance).
  const int64_t step = c_->Step(running);
  EXPECT_TRUE(WaitFor(
      [&] {
        const auto j =
            nlohmann::json::parse(As("ops", "get -o json " + running).out, nullptr, false);
        return j.is_object() && j.contains("progress") &&
               Cluster::Int(j["progress"]["step"]) > step;
      },
      seconds(20)));
}

// Every path rule refuses at submit, naming the field; a symbolic link
// swapped in after the submit is refused by the worker, before it writes.
TEST_F(TenancyTest, JobPathsStayInsideTheWorkDirectoryAndTheOwnersArea) {
  auto refused = [&](const std::string& name, const std::string& spec) {
    return As("alice", "submit " + c_->WriteSpec(name, spec));
  };
  std::string absolute = SpecOf("abs", 10);
  absolute.replace(absolute.find("model: model"), 12, "model: /etc");
  CommandResult r = refused("abs", absolute);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model: '/etc' must be relative"), std::string::npos) << r.err;
  std::string climb = SpecOf("climb", 10);
  climb.replace(climb.find("data: data.jsonl"), 16, "data: ../data.jsonl");
  r = refused("climb", climb);
  EXPECT_NE(r.err.find("data: '../data.jsonl' must not climb out"), std::string::npos) << r.err;
  std::filesystem::create_symlink("/tmp", c_->dir() / "escape");
  auto with_dir = [&](const std::string& name, const std::string& dir) {
    std::string spec = SpecOf(name, 10);
    spec.replace(spec.find("checkpoint: {every_steps: 0}"), 28,
                 "checkpoint: {every_steps: 0, dir: " + dir + "}");
    return spec;
  };
  r = refused("link", with_dir("link", "escape/run"));
  EXPECT_NE(r.err.find("checkpoint.dir: 'escape/run' leads outside"), std::string::npos) << r.err;
  r = refused("theirs", with_dir("theirs", "bob/run"));
  EXPECT_NE(r.err.find("checkpoint.dir: 'bob/run' must lie in the owner's area alice/"),
            std::string::npos)
      << r.err;

  // Accepted while data.jsonl is a plain file, then swapped for a link out.
  std::filesystem::create_directories(c_->dir() / "alice");
  std::filesystem::copy_file(c_->dir() / "data.jsonl", c_->dir() / "alice/data.jsonl");
  std::string swapped = SpecOf("swapped", 10);
  swapped.replace(swapped.find("data: data.jsonl"), 16, "data: alice/data.jsonl");
  const CommandResult submitted =
      As("alice", "submit -o json " + c_->WriteSpec("swapped", swapped));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string id = nlohmann::json::parse(submitted.out).value("id", "");
  std::filesystem::remove(c_->dir() / "alice/data.jsonl");
  std::filesystem::create_symlink(c_->dir() / "data.jsonl.outside", c_->dir() / "alice/data.jsonl");
  WriteFile(std::filesystem::path("/tmp") / "sbp-outside-marker", "");
  std::filesystem::create_symlink("/tmp/sbp-outside-marker", c_->dir() / "data.jsonl.outside");
  c_->StartWorker("w0");
  ASSERT_TRUE(
      WaitFor([&] { return As("alice", "get " + id).out.find("FAILED") != std::string::npos; },
              seconds(30)))
      << As("alice", "get " + id).out << c_->Logs();
  const auto job = nlohmann::json::parse(As("alice", "get -o json " + id).out, nullptr, false);
  EXPECT_EQ(job.value("failure_class", ""), "FAILURE_CLASS_BAD_INPUT") << job.dump();
  EXPECT_NE(As("alice", "events " + id).out.find("data: 'alice/data.jsonl' leads outside"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(c_->dir() / "alice/runs" / id)) << "nothing written";
}

TEST(ClosedByDefaultTest, NoCoordinatorListensOpenOffLoopback) {
  Cluster c("closed");
  const CommandResult open =
      RunCommand(BinaryDir() + "/bin/sbp-coordinator --listen 0.0.0.0:0 --db open.db", c.dir());
  EXPECT_EQ(open.exit_code, 2) << open.err;
  EXPECT_NE(open.err.find("refusing to listen open on 0.0.0.0:0"), std::string::npos) << open.err;
  EXPECT_FALSE(std::filesystem::exists(c.dir() / "open.db"));
}

}  // namespace
}  // namespace sbp::testing
