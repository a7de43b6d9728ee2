// `sbp metrics` and `sbp logs` against real processes: a job's metrics lines
// and its worker's log lines reach the coordinator and come back to its
// owner (and an admin, never another user) without the run directory or the
// worker's log; `--follow` ends when the job does; they survive a restart of
// the coordinator.
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"
#include "tests/e2e/cluster_test_util.h"
#include "tests/testing/png_read.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

// The hex SHA-256 of `token`, as a users file holds it.
std::string Sha256(const std::string& token, const std::filesystem::path& dir) {
  const CommandResult r = RunCommand("sh -c 'printf %s " + token + " | sha256sum'", dir);
  return r.out.substr(0, r.out.find(' '));
}

std::string UsersFile(const std::filesystem::path& dir) {
  return absl::StrCat("users:\n  - name: alice\n    token_sha256: [", Sha256("alice-secret", dir),
                      "]\n  - name: bob\n    token_sha256: [", Sha256("bob-secret", dir),
                      "]\n  - name: ops\n    role: admin\n    token_sha256: [",
                      Sha256("ops-secret", dir), "]\nworkers:\n  - name: pool\n    token_sha256: [",
                      Sha256("worker-secret", dir), "]\n");
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

class JobOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    c_ = std::make_unique<Cluster>("job_output");
    for (const char* who : {"alice", "bob", "ops"}) {
      WriteFile(c_->dir() / absl::StrCat(who, ".token"), absl::StrCat(who, "-secret\n"));
    }
    WriteFile(c_->dir() / "users.yaml", UsersFile(c_->dir()));
    // Alice's jobs read and write in her area, <work-dir>/alice/.
    const std::filesystem::path area = c_->dir() / "alice";
    std::filesystem::create_directories(area / "model");
    for (const auto& entry : std::filesystem::directory_iterator(c_->dir() / "model")) {
      std::filesystem::copy_file(entry.path(), area / "model" / entry.path().filename());
    }
    std::filesystem::copy_file(c_->dir() / "data.jsonl", area / "data.jsonl");
    StartCoordinator();
  }
  void StartCoordinator() {
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
  // `sbp ARGS` as alice in the background, its stdout to `out`.
  std::unique_ptr<Process> Background(const std::string& args, const std::string& out) {
    const std::string command = absl::StrCat(SbpBinary(), " --coordinator ", c_->address(),
                                             " --token-file alice.token ", args, " >", out);
    return std::make_unique<Process>(std::vector<std::string>{"/bin/sh", "-c", command}, c_->dir(),
                                     c_->dir() / (out + ".err"));
  }
  std::string SubmitAsAlice(const std::string& args) {
    const CommandResult r = As("alice", "submit -o json " + args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto job = nlohmann::json::parse(r.out, nullptr, false);
    return job.is_object() ? job.value("id", "") : "";
  }
  bool Succeeds(const std::string& id) {
    return WaitFor(
        [&] { return As("alice", "get " + id).out.find("SUCCEEDED") != std::string::npos; },
        seconds(60));
  }

  std::unique_ptr<Cluster> c_;
  std::unique_ptr<Process> coordinator_;
};

TEST_F(JobOutputTest, MetricsAndLogsComeBackToTheOwnerOnly) {
  c_->WriteSpec("first", c_->Spec("first", 12, 2, 5));
  const std::string id = SubmitAsAlice("first.yaml");
  ASSERT_FALSE(id.empty());
  // Followers start before any worker: they see the whole run, then end with it.
  auto metrics_follower = Background("metrics --follow -o json " + id, "follow.jsonl");
  auto logs_follower = Background("logs -f " + id, "follow.log");
  c_->StartWorker("w0");
  ASSERT_TRUE(Succeeds(id)) << c_->Logs();
  ASSERT_TRUE(WaitFor([&] { return !metrics_follower->running() && !logs_follower->running(); },
                      seconds(30)))
      << "--follow did not end with the job";
  EXPECT_EQ(metrics_follower->exit_code(), 0) << ReadAll((c_->dir() / "follow.jsonl.err").string());
  EXPECT_EQ(logs_follower->exit_code(), 0);

  const std::string jsonl = ReadAll((c_->dir() / "alice/runs/first/metrics.jsonl").string());
  const std::vector<std::string> steps = Lines(jsonl);
  ASSERT_EQ(steps.size(), 12u);
  EXPECT_EQ(ReadAll((c_->dir() / "follow.jsonl").string()), jsonl);
  EXPECT_EQ(As("alice", "metrics -o json " + id).out, jsonl);
  EXPECT_EQ(Lines(As("alice", "metrics -o json --from-step 10 " + id).out),
            std::vector<std::string>(steps.begin() + 9, steps.end()));

  // CSV: a header of every key, a row of as many fields per step.
  const std::vector<std::string> csv = Lines(As("alice", "metrics -o csv " + id).out);
  ASSERT_EQ(csv.size(), 13u);
  const std::vector<std::string> header = absl::StrSplit(csv[0], ',');
  EXPECT_NE(std::find(header.begin(), header.end(), "step"), header.end()) << csv[0];
  EXPECT_NE(std::find(header.begin(), header.end(), "loss"), header.end()) << csv[0];
  for (size_t i = 1; i < csv.size(); ++i) {
    EXPECT_EQ(std::vector<std::string>(absl::StrSplit(csv[i], ',')).size(), header.size());
  }
  const std::string table = As("alice", "metrics " + id).out;
  EXPECT_EQ(Lines(table).size(), 13u) << table;
  EXPECT_NE(table.find("LOSS"), std::string::npos);

  // The job's log: its own lines, as the worker printed them.
  const std::string logs = As("alice", "logs " + id).out;
  EXPECT_NE(logs.find("running job " + id + " attempt 1"), std::string::npos) << logs;
  EXPECT_NE(logs.find("step 12/12"), std::string::npos) << logs;
  EXPECT_NE(logs.find("checkpoint"), std::string::npos) << logs;
  EXPECT_EQ(ReadAll((c_->dir() / "follow.log").string()), logs);

  // Access as for every job call.
  for (const std::string verb : {"metrics ", "logs "}) {
    const CommandResult bob = As("bob", verb + id);
    EXPECT_EQ(bob.exit_code, 2) << verb;
    EXPECT_NE(bob.err.find("no job with id"), std::string::npos) << verb << bob.err;
    EXPECT_EQ(bob.out, "") << verb;
    EXPECT_EQ(As("ops", verb + id).exit_code, 0) << verb;
    const CommandResult unknown = As("alice", verb + "no-such-job");
    EXPECT_EQ(unknown.exit_code, 2);
    EXPECT_NE(unknown.err.find("no job with id"), std::string::npos) << unknown.err;
    const CommandResult attempt = As("alice", verb + "--attempt 3 " + id);
    EXPECT_EQ(attempt.exit_code, 2);
    EXPECT_NE(attempt.err.find("there is no attempt 3"), std::string::npos) << attempt.err;
  }
  EXPECT_EQ(As("ops", "metrics -o json " + id).out, jsonl);

  // `sbp plot ID` draws the same curve from the coordinator, for its owner only.
  const std::string png = (c_->dir() / "curve.png").string();
  const CommandResult plot = As("alice", "plot --out " + png + " " + id);
  EXPECT_EQ(plot.exit_code, 0) << plot.err;
  EXPECT_TRUE(DecodePng(ReadAll(png)).ok);
  const CommandResult chart = As("alice", "plot " + id);
  EXPECT_EQ(chart.exit_code, 0) << chart.err;
  EXPECT_NE(chart.out.find(id), std::string::npos) << chart.out;
  const CommandResult bob_plot = As("bob", "plot " + id);
  EXPECT_EQ(bob_plot.exit_code, 2);
  EXPECT_NE(bob_plot.err.find("no job with id"), std::string::npos) << bob_plot.err;
  EXPECT_NE(As("alice", "metrics -o csv --follow " + id).err.find("-o csv"), std::string::npos);

  // A second job continues the run on the same worker: each job's log has
  // only its own lines; the second's metrics are the run's steps 13-16.
  const std::string next = SubmitAsAlice("first.yaml --resume " + id + " --set train.steps=16");
  ASSERT_FALSE(next.empty());
  ASSERT_TRUE(Succeeds(next)) << c_->Logs();
  const std::string next_logs = As("alice", "logs " + next).out;
  EXPECT_NE(next_logs.find("continuing from"), std::string::npos) << next_logs;
  EXPECT_EQ(next_logs.find(id + " "), std::string::npos) << next_logs;
  EXPECT_EQ(As("alice", "logs " + id).out, logs);
  const std::vector<std::string> run =
      Lines(ReadAll((c_->dir() / "alice/runs/first/metrics.jsonl").string()));
  ASSERT_EQ(run.size(), 16u);
  EXPECT_EQ(Lines(As("alice", "metrics -o json " + next).out),
            std::vector<std::string>(run.begin() + 12, run.end()));

  // Stored: a restarted coordinator still has every line.
  coordinator_->Kill(SIGKILL);
  StartCoordinator();
  EXPECT_EQ(As("alice", "metrics -o json " + id).out, jsonl);
  EXPECT_EQ(As("alice", "logs " + id).out, logs);
}

}  // namespace
}  // namespace sbp::testing
