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
    // The admin's read-only shared root: a base model and a data set.
    std::filesystem::create_directories(c_->dir() / "shared/models");
    CopyModel(c_->dir() / "shared/models/tiny");
    std::filesystem::copy_file(c_->dir() / "data.jsonl", c_->dir() / "shared/data.jsonl");
    // Each user's jobs read and write in their own area, <work-dir>/<user>/:
    // a copy of the tiny model and data set for each.
    for (const char* who : {"alice", "bob", "ops"}) {
      const std::filesystem::path area = c_->dir() / who;
      std::filesystem::create_directories(area);
      CopyModel(area / "model");
      std::filesystem::copy_file(c_->dir() / "data.jsonl", area / "data.jsonl");
    }
    coordinator_ = std::make_unique<Process>(
        std::vector<std::string>{BinaryDir() + "/bin/sbp-coordinator", "--listen", c_->address(),
                                 "--db", (c_->dir() / "coordinator.db").string(), "--users",
                                 (c_->dir() / "users.yaml").string(), "--lease-seconds", "3",
                                 "--work-dir", c_->dir().string(), "--shared-dir",
                                 (c_->dir() / "shared").string(), "--max-streams-per-client", "2"},
        c_->dir(), c_->dir() / "coordinator.log");
    ASSERT_TRUE(WaitFor([&] { return As("alice", "whoami").exit_code == 0; }, seconds(20)))
        << ReadAll((c_->dir() / "coordinator.log").string());
  }
  // A copy of the cluster's tiny model directory (its files) at `to`.
  void CopyModel(const std::filesystem::path& to) {
    std::filesystem::create_directories(to);
    for (const auto& entry : std::filesystem::directory_iterator(c_->dir() / "model")) {
      std::filesystem::copy_file(entry.path(), to / entry.path().filename());
    }
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
  // Submits `spec` as `who` and waits up to a minute for it to succeed;
  // returns its id.
  std::string RunToSuccess(const std::string& who, const std::string& name,
                           const std::string& spec) {
    const CommandResult r = As(who, "submit -o json " + c_->WriteSpec(name, spec));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto job = nlohmann::json::parse(r.out, nullptr, false);
    const std::string id = job.is_object() ? job.value("id", "") : "";
    EXPECT_TRUE(
        WaitFor([&] { return As(who, "get " + id).out.find("SUCCEEDED") != std::string::npos; },
                seconds(60)))
        << As(who, "get " + id).out << c_->Logs();
    return id;
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

// A busy worker's job id is shown to the job's owner and to admins only: a
// job id names its run directory (<owner>/runs/<job id>).
TEST_F(TenancyTest, WorkersShowAJobIdOnlyToItsOwnerAndAdmins) {
  c_->StartWorker("w0");
  ASSERT_TRUE(WaitFor([&] { return As("ops", "workers").out.find("w0") != std::string::npos; },
                      seconds(20)));
  const std::string id = SubmitAs("alice", "busy");
  ASSERT_TRUE(WaitFor([&] { return StepOf(id) >= 1; }, seconds(30))) << c_->Logs();
  for (const char* who : {"alice", "ops", "bob"}) {
    const CommandResult table = As(who, "workers");
    const CommandResult json = As(who, "workers -o json");
    ASSERT_EQ(table.exit_code, 0) << table.err;
    ASSERT_EQ(json.exit_code, 0) << json.err;
    EXPECT_NE(table.out.find("busy"), std::string::npos) << who << ": " << table.out;
    const bool sees = std::string(who) != "bob";
    EXPECT_EQ(table.out.find(id) != std::string::npos, sees) << who << ": " << table.out;
    EXPECT_EQ(json.out.find(id) != std::string::npos, sees) << who << ": " << json.out;
  }
}

// Request ids belong to their submitter: bob reusing alice's id gets a job
// of his own (he cannot tell that hers exists, nor squat it), and alice's
// idempotent re-submit still returns hers.
TEST_F(TenancyTest, RequestIdsAreScopedByOwner) {
  const std::string spec = c_->WriteSpec("nightly", SpecOf("nightly", 10));
  auto submit = [&](const std::string& who) {
    const CommandResult r = As(who, "submit -o json --request-id nightly-2026-12-03 " + spec);
    EXPECT_EQ(r.exit_code, 0) << who << ": " << r.err;
    const auto job = nlohmann::json::parse(r.out, nullptr, false);
    return job.is_object() ? job.value("id", "") : "";
  };
  const std::string bobs = submit("bob");  // first: the id is bob's now
  const std::string alices = submit("alice");
  ASSERT_FALSE(bobs.empty());
  ASSERT_FALSE(alices.empty());
  EXPECT_NE(alices, bobs);
  EXPECT_EQ(submit("alice"), alices);
  EXPECT_EQ(submit("bob"), bobs);
}

// The stream limit is per identity: alice holding all of hers (2 here)
// leaves bob's watches alone, although both call from one address.
TEST_F(TenancyTest, StreamLimitsArePerIdentityNotPerAddress) {
  const std::string alices = SubmitAs("alice", "watched");
  const std::string bobs = SubmitAs("bob", "watched-too");
  auto watch = [&](const std::string& who, const std::string& id, const std::string& log) {
    return std::make_unique<Process>(
        std::vector<std::string>{SbpBinary(), "--coordinator", c_->address(), "--token-file",
                                 (c_->dir() / (who + ".token")).string(), "watch", id},
        c_->dir(), c_->dir() / log);
  };
  auto first = watch("alice", alices, "watch-a1.log");
  auto second = watch("alice", alices, "watch-a2.log");
  std::this_thread::sleep_for(seconds(2));
  const CommandResult third = As("alice", "watch " + alices);
  EXPECT_NE(third.exit_code, 0);
  EXPECT_NE(third.err.find("identity alice already has 2 open streams"), std::string::npos)
      << third.err;
  auto bob = watch("bob", bobs, "watch-b.log");
  std::this_thread::sleep_for(seconds(2));
  EXPECT_TRUE(bob->running()) << ReadAll((c_->dir() / "watch-b.log").string());
  EXPECT_EQ(ReadAll((c_->dir() / "watch-b.log").string()).find("RESOURCE_EXHAUSTED"),
            std::string::npos);
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

// A user named ".." would own the work directory's parent as its area: a
// users file that names one is refused at reload, naming the entry, and the
// identities already loaded stay in force.
TEST_F(TenancyTest, ADotDotUserNameIsRefusedAtReload) {
  WriteFile(c_->dir() / "dots.token", "dots-secret\n");
  std::string with_dots = UsersFile(true);
  with_dots.replace(with_dots.find("\nworkers:") + 1, 0,
                    absl::StrCat("  - name: '..'\n    token_sha256: [",
                                 server::TokenSha256("dots-secret"), "]\n"));
  WriteFile(c_->dir() / "users.yaml.new", with_dots);
  std::filesystem::rename(c_->dir() / "users.yaml.new", c_->dir() / "users.yaml");
  const std::string log = (c_->dir() / "coordinator.log").string();
  ASSERT_TRUE(WaitFor([&] { return ReadAll(log).find("'..' is not a name") != std::string::npos; },
                      seconds(10)))
      << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("users file not reloaded"), std::string::npos);
  const CommandResult dots = As("dots", "whoami");
  EXPECT_NE(dots.exit_code, 0);
  EXPECT_NE(dots.err.find("invalid token"), std::string::npos) << dots.err;
  EXPECT_EQ(As("alice", "whoami").exit_code, 0);
}

// Every path of a job resolves in its owner's area: a path that climbs out,
// an absolute one (no shared directory here), or a link to another user's
// area is refused at submit, naming the field and nothing of what lies
// outside; a symbolic link swapped in after the submit is refused by the
// worker, before it writes.
TEST_F(TenancyTest, JobPathsStayInsideTheOwnersArea) {
  auto submit = [&](const std::string& who, const std::string& name, const std::string& spec) {
    return As(who, "submit " + c_->WriteSpec(name, spec));
  };
  auto with = [&](const std::string& name, const std::string& from, const std::string& to) {
    std::string spec = SpecOf(name, 10);
    spec.replace(spec.find(from), from.size(), to);
    return spec;
  };
  CommandResult r = submit("alice", "abs", with("abs", "model: model", "model: /etc"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model: '/etc' is outside the shared directory"), std::string::npos)
      << r.err;
  r = submit(
      "alice", "abs-write",
      with("abs-write", "checkpoint: {every_steps: 0}",
           "checkpoint: {every_steps: 0, dir: " + (c_->dir() / "shared/run").string() + "}"));
  EXPECT_NE(r.err.find("must be relative (resolved in the owner's area alice/)"), std::string::npos)
      << r.err;
  r = submit("alice", "climb", with("climb", "data: data.jsonl", "data: ../bob/data.jsonl"));
  EXPECT_NE(r.err.find("data: '../bob/data.jsonl' must not climb out"), std::string::npos) << r.err;
  // Bob links alice's area into his own and names her model through it.
  std::filesystem::create_directory_symlink(c_->dir() / "alice", c_->dir() / "bob/alices");
  r = submit("bob", "steal", with("steal", "model: model", "model: alices/model"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model: 'alices/model' leads outside the owner's area bob/"),
            std::string::npos)
      << r.err;
  r = submit("bob", "steal-resume", SpecOf("steal-resume", 10) + "resume_from: alices/runs\n");
  EXPECT_NE(r.err.find("resume_from: 'alices/runs' leads outside the owner's area bob/"),
            std::string::npos)
      << r.err;
  // A component no file system takes is bad input at submit (it was an
  // INTERNAL storage error, retried, when the run created its directory).
  r = submit("alice", "long",
             with("long", "checkpoint: {every_steps: 0}",
                  "checkpoint: {every_steps: 0, dir: runs/" + std::string(256, 'x') + "}"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("checkpoint.dir: has a component of 256 bytes"), std::string::npos) << r.err;
  std::filesystem::create_directory_symlink("/tmp", c_->dir() / "alice/escape");
  r = submit("alice", "link",
             with("link", "checkpoint: {every_steps: 0}",
                  "checkpoint: {every_steps: 0, dir: escape/run}"));
  EXPECT_NE(r.err.find("checkpoint.dir: 'escape/run' leads outside the owner's area alice/"),
            std::string::npos)
      << r.err;
  // The disk tier's directory is written like checkpoint.dir: relative and
  // inside the area, links followed.
  const std::string chunks = "chunk_tokens: 4, logits_chunk_tokens: 4}";
  auto disk_tier = [&](const std::string& name, const std::string& dir) {
    return with(name, chunks,
                "chunk_tokens: 4, logits_chunk_tokens: 4, offload: {checkpoints: disk, "
                "disk_dir: " +
                    dir + "}}");
  };
  r = submit("alice", "disk-abs", disk_tier("disk-abs", "/tmp"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("streambp.offload.disk_dir: '/tmp' must be relative"), std::string::npos)
      << r.err;
  r = submit("alice", "disk-link", disk_tier("disk-link", "escape"));
  EXPECT_NE(r.err.find("streambp.offload.disk_dir: 'escape' leads outside the owner's area alice/"),
            std::string::npos)
      << r.err;
  // A config.json linked out of the area: the coordinator refuses it before
  // opening anything, with the same words whether the target exists or not.
  std::string refusals[2];
  const char* targets[2] = {"/etc/hostname", "/nonexistent/config.json"};
  for (int i = 0; i < 2; ++i) {
    const std::string model = absl::StrCat("linked", i);
    std::filesystem::create_directories(c_->dir() / "bob" / model);
    std::filesystem::create_symlink(targets[i], c_->dir() / "bob" / model / "config.json");
    r = submit("bob", model, with(model, "model: model", "model: " + model));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    refusals[i] = r.err;
    refusals[i].replace(refusals[i].find(model), model.size(), "MODEL");
    EXPECT_NE(r.err.find("leads outside the owner's area bob/"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(targets[i]), std::string::npos) << r.err;
  }
  EXPECT_EQ(refusals[0], refusals[1]);

  // Accepted while data.jsonl is a plain file, then swapped for a link out.
  const CommandResult submitted =
      As("alice", "submit -o json " + c_->WriteSpec("swapped", SpecOf("swapped", 10)));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string id = nlohmann::json::parse(submitted.out).value("id", "");
  std::filesystem::remove(c_->dir() / "alice/data.jsonl");
  std::filesystem::create_symlink(c_->dir() / "bob/data.jsonl", c_->dir() / "alice/data.jsonl");
  c_->StartWorker("w0");
  ASSERT_TRUE(
      WaitFor([&] { return As("alice", "get " + id).out.find("FAILED") != std::string::npos; },
              seconds(30)))
      << As("alice", "get " + id).out << c_->Logs();
  const auto job = nlohmann::json::parse(As("alice", "get -o json " + id).out, nullptr, false);
  EXPECT_EQ(job.value("failure_class", ""), "BAD_INPUT") << job.dump();
  EXPECT_NE(As("alice", "events " + id).out.find("data: 'data.jsonl' leads outside"),
            std::string::npos)
      << As("alice", "events " + id).out;
  EXPECT_FALSE(std::filesystem::exists(c_->dir() / "alice/runs" / id)) << "nothing written";
}

// An admin's shared root serves base models and data sets to every user,
// read-only, by absolute path.
TEST_F(TenancyTest, JobsReadTheSharedRootByAbsolutePath) {
  c_->StartWorker("w0", {"--shared-dir", (c_->dir() / "shared").string()});
  std::string spec = SpecOf("shared", 2);
  spec.replace(spec.find("model: model"), 12,
               "model: " + (c_->dir() / "shared/models/tiny").string());
  spec.replace(spec.find("data: data.jsonl"), 16,
               "data: " + (c_->dir() / "shared/data.jsonl").string());
  const std::string id = RunToSuccess("bob", "shared", spec);
  EXPECT_TRUE(std::filesystem::exists(c_->dir() / "bob/runs" / id / "metrics.jsonl"));
}

// checkpoint.dir means one directory in the check and in the write: the
// owner's area joined with it.
TEST_F(TenancyTest, CheckpointDirIsWrittenWhereItIsChecked) {
  c_->StartWorker("w0");
  std::string spec = SpecOf("placed", 2);
  spec.replace(spec.find("checkpoint: {every_steps: 0}"), 28,
               "checkpoint: {every_steps: 0, dir: nested/run}");
  RunToSuccess("alice", "placed", spec);
  EXPECT_TRUE(std::filesystem::exists(c_->dir() / "alice/nested/run/metrics.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(c_->dir() / "nested"));
  EXPECT_FALSE(std::filesystem::exists(c_->dir() / "alice/alice"));
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
