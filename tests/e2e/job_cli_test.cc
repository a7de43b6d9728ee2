// The job verbs of `sbp` against a real sbp-coordinator with two real
// sbp-worker processes on loopback: a job goes submit -> scheduled -> running
// -> succeeded and list/get/watch/events/workers show it; idempotent submit;
// tokens; a gang job waits with a reason; cancellation.
#include <gtest/gtest.h>
#include <signal.h>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

class JobCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new Cluster("job_cli");
    cluster_->StartCoordinator();
    for (int i = 0; i < 2; ++i) {
      metrics_ports_[i] = FreePort();
      cluster_->StartWorker(absl::StrCat("w", i),
                            {absl::StrCat("--metrics-listen=127.0.0.1:", metrics_ports_[i])});
    }
    ASSERT_TRUE(WaitFor(
        [] {
          const CommandResult r = cluster_->Sbp("workers -o json");
          const auto j = nlohmann::json::parse(r.out, nullptr, false);
          return r.exit_code == 0 && j.is_object() && j.contains("workers") &&
                 j["workers"].size() == 2;
        },
        seconds(20)))
        << cluster_->Logs();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void TearDown() override {
    if (HasFailure()) std::fprintf(stderr, "%s\n", cluster_->Logs().c_str());
  }

  static Cluster* cluster_;
  static int metrics_ports_[2];
};

Cluster* JobCliTest::cluster_ = nullptr;
int JobCliTest::metrics_ports_[2] = {0, 0};

TEST_F(JobCliTest, SubmitRunsToSuccessAndEveryVerbShowsIt) {
  Cluster& c = *cluster_;
  const std::string spec = c.WriteSpec("lifecycle", c.Spec("lifecycle", 6, 4, 2));
  const CommandResult submit = c.Sbp("submit " + spec + " --watch");
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const std::string id = submit.out.substr(0, submit.out.find('\n'));
  ASSERT_FALSE(id.empty());
  // The watch printed each transition with its reason, the progress bar and the outcome.
  for (const char* text : {"PENDING", "SCHEDULED", "RUNNING", "SUCCEEDED", "6/6", "loss"}) {
    EXPECT_NE(submit.err.find(text), std::string::npos) << text << " in:\n" << submit.err;
  }
  EXPECT_NE(submit.out.find("job " + id + " SUCCEEDED"), std::string::npos) << submit.out;

  const nlohmann::json job = c.GetJob(id);
  ASSERT_TRUE(job.is_object());
  EXPECT_EQ(job["id"], id);
  EXPECT_EQ(job["state"], "SUCCEEDED");
  EXPECT_FALSE(job["reason"].get<std::string>().empty());
  EXPECT_EQ(job["attempt"], 1);
  EXPECT_EQ(Cluster::Int(job["progress"]["step"]), 6);
  EXPECT_EQ(Cluster::Int(job["progress"]["total_steps"]), 6);
  EXPECT_GT(Cluster::Int(job["progress"]["peak_bytes"]), 0);
  EXPECT_NE(job["last_checkpoint"].get<std::string>().find("step-00000006"), std::string::npos);

  const CommandResult get = c.Sbp("get " + id);
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_NE(get.out.find("SUCCEEDED"), std::string::npos) << get.out;
  EXPECT_NE(get.out.find("6/6"), std::string::npos) << get.out;

  const CommandResult list = c.Sbp("list");
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(list.out.rfind("ID", 0), 0u) << list.out;
  EXPECT_NE(list.out.find(id), std::string::npos) << list.out;
  const std::string succeeded = c.Sbp("list --state succeeded -o json").out;
  EXPECT_NE(succeeded.find(id), std::string::npos);
  const CommandResult running = c.Sbp("list --state running --state pending -o json");
  ASSERT_EQ(running.exit_code, 0) << running.err;
  EXPECT_EQ(running.out.find(id), std::string::npos);
  EXPECT_EQ(c.Sbp("list --state sleeping").exit_code, 2);

  const CommandResult watch = c.Sbp("watch " + id);
  EXPECT_EQ(watch.exit_code, 0) << watch.err;
  EXPECT_NE(watch.out.find("SUCCEEDED"), std::string::npos);

  const CommandResult events = c.Sbp("events " + id);
  ASSERT_EQ(events.exit_code, 0) << events.err;
  EXPECT_NE(events.out.find("checkpoint"), std::string::npos) << events.out;

  const CommandResult workers = c.Sbp("workers");
  ASSERT_EQ(workers.exit_code, 0) << workers.err;
  EXPECT_NE(workers.out.find("w0"), std::string::npos) << workers.out;
  EXPECT_NE(workers.out.find("w1"), std::string::npos) << workers.out;
  EXPECT_NE(workers.out.find("2.0 GiB"), std::string::npos) << workers.out;

  // The run wrote what `sbp train` writes.
  const std::string metrics = ReadAll((c.dir() / "runs/lifecycle/metrics.jsonl").string());
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 6);

  // The worker that ran it exposes the training series, labelled by job_id.
  std::string text;
  for (int port : metrics_ports_) text += HttpGet(port, "/metrics");
  for (const std::string& name : std::vector<std::string>{
           "sbp_worker_memory_peak_bytes", "sbp_worker_memory_current_bytes",
           "sbp_worker_memory_capacity_bytes 2147483648", "sbp_train_tokens_total{job_id=\"" + id,
           "sbp_train_tokens_per_second{job_id=\"" + id,
           "sbp_train_step_seconds_count{job_id=\"" + id, "sbp_train_loss{job_id=\"" + id,
           "sbp_train_mfu_ratio{job_id=\"" + id, "sbp_train_step{job_id=\"" + id + "\"} 6"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
}

TEST_F(JobCliTest, SubmitWithTheSameRequestIdMakesOneJob) {
  Cluster& c = *cluster_;
  // No checkpoint.dir: each job runs in a directory of its own.
  std::string text = c.Spec("idem", 2, 2, 0);
  text.replace(text.find(", dir: runs/idem"), 16, "");
  const std::string spec = c.WriteSpec("idem", text);
  const std::string first = c.Submit(spec, "--request-id same-key-1");
  const std::string second = c.Submit(spec, "--request-id same-key-1");
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first, second);
  const CommandResult again = c.Sbp("submit " + spec + " --request-id same-key-1");
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_NE(again.err.find("already submitted"), std::string::npos) << again.err;
  const auto all = nlohmann::json::parse(c.Sbp("list --limit 0 -o json").out, nullptr, false);
  ASSERT_TRUE(all.is_object());
  int count = 0;
  for (const auto& job : all["jobs"]) count += job["name"] == "idem";
  EXPECT_EQ(count, 1);
  // A different (default: random) request id is a new job.
  const std::string third = c.Submit(spec);
  EXPECT_NE(third, first);
  for (const std::string& id : {first, third}) {
    EXPECT_TRUE(WaitFor([&] { return c.State(id) == "SUCCEEDED"; }, seconds(30)));
  }
}

TEST_F(JobCliTest, TokensAndRpcErrorsAreReportedByCodeName) {
  Cluster& c = *cluster_;
  CommandResult r = c.Sbp("list", "");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("UNAUTHENTICATED"), std::string::npos) << r.err;
  WriteFile(c.dir() / "wrong.token", "not-the-token\n");
  r = c.Sbp("workers", "wrong.token");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("UNAUTHENTICATED"), std::string::npos) << r.err;
  r = c.Sbp("list", "worker.token");  // a worker's token is not a client's
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("PERMISSION_DENIED"), std::string::npos) << r.err;
  r = RunCommand(
      "SBP_TOKEN=client-secret SBP_COORDINATOR=" + c.address() + " " + SbpBinary() + " list",
      c.dir());
  EXPECT_EQ(r.exit_code, 0) << r.err;

  r = c.Sbp("get no-such-job");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;
  const std::string bad = c.WriteSpec("bad", c.Spec("bad", 2, 2, 0) + "trian: {}\n");
  r = c.Sbp("submit " + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("trian"), std::string::npos) << r.err;
  r = c.Sbp("submit missing.yaml");
  EXPECT_EQ(r.exit_code, 2);
  // A job no registered worker can hold (Qwen3-8B on 2 GiB workers) is
  // refused by admission: bad input, with the planner's numbers.
  std::string huge = c.Spec("huge", 2, 2, 0);
  huge.replace(huge.find("model: model"), 12, "model: qwen3-8b");
  r = c.Sbp("submit " + c.WriteSpec("huge", huge));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << r.err;
  r = RunCommand(SbpBinary() + " --coordinator 127.0.0.1:1 --token-file client.token list",
                 c.dir());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
}

TEST_F(JobCliTest, GangJobWaitsForTwoIdleWorkersAndSaysWhy) {
  Cluster& c = *cluster_;
  const std::string long_id = c.Submit(c.WriteSpec("busy", c.Spec("busy", 1000000, 2, 0)));
  ASSERT_TRUE(WaitFor([&] { return c.Step(long_id) >= 1; }, seconds(30)));
  const std::string gang_id = c.Submit(
      c.WriteSpec("gang", c.Spec("gang", 4, 2, 0, "resources: {world_size: 2, device: cpu}\n")));
  nlohmann::json gang;
  ASSERT_TRUE(WaitFor(
      [&] {
        gang = c.GetJob(gang_id);
        return gang.is_object() && gang["state"] == "PENDING" &&
               gang["reason"].get<std::string>().find('2') != std::string::npos;
      },
      seconds(10)))
      << gang.dump();
  std::fprintf(stderr, "pending reason: %s\n", gang["reason"].get<std::string>().c_str());
  const CommandResult get = c.Sbp("get " + gang_id);
  EXPECT_NE(get.out.find("PENDING"), std::string::npos) << get.out;
  EXPECT_NE(get.out.find(gang["reason"].get<std::string>()), std::string::npos) << get.out;

  CommandResult cancel = c.Sbp("cancel " + gang_id);
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_EQ(c.State(gang_id), "CANCELLED");

  // A running job stops within seconds of a cancel, and watch reports the outcome.
  const auto start = std::chrono::steady_clock::now();
  cancel = c.Sbp("cancel " + long_id + " --reason enough");
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  const CommandResult watch = c.Sbp("watch " + long_id);
  EXPECT_EQ(watch.exit_code, 1) << watch.err;
  EXPECT_NE(watch.out.find("CANCELLED"), std::string::npos) << watch.out;
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
  // Both workers are idle again.
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string out = c.Sbp("workers").out;
        return out.find("busy") == std::string::npos;
      },
      seconds(10)))
      << c.Sbp("workers").out;
  cancel = c.Sbp("cancel " + long_id);
  EXPECT_EQ(cancel.exit_code, 1);
  EXPECT_NE(cancel.err.find("FAILED_PRECONDITION"), std::string::npos) << cancel.err;
}

// Ctrl-C on `sbp submit --watch` detaches, says so, and leaves the job
// running (it was silent before; `sbp run` cancels its job, and says that).
TEST_F(JobCliTest, CtrlCOnAWatchDetachesAndSaysSo) {
  Cluster& c = *cluster_;
  const std::string spec = c.WriteSpec("detach", c.Spec("detach", 1000000, 2, 0));
  Process watch({SbpBinary(), "--coordinator", c.address(), "--token-file",
                 (c.dir() / "client.token").string(), "submit", "--watch", spec},
                c.dir(), c.dir() / "detach.log");
  const std::string log = (c.dir() / "detach.log").string();
  // The watch's header names the job: "job <id> (detach)".
  ASSERT_TRUE(
      WaitFor([&] { return ReadAll(log).find(" (detach)\n") != std::string::npos; }, seconds(20)))
      << ReadAll(log);
  const std::string text = ReadAll(log);
  const size_t header = text.find("job detach-");
  ASSERT_NE(header, std::string::npos) << text;
  const std::string id = text.substr(header + 4, text.find(' ', header + 4) - header - 4);
  std::this_thread::sleep_for(seconds(1));
  ::kill(watch.pid(), SIGINT);
  ASSERT_TRUE(WaitFor([&] { return !watch.running(); }, seconds(10))) << ReadAll(log);
  EXPECT_EQ(watch.exit_code(), 128 + SIGINT);
  EXPECT_NE(ReadAll(log).find("sbp submit: detached from job " + id + "; it keeps running"),
            std::string::npos)
      << ReadAll(log);
  EXPECT_NE(c.State(id), "CANCELLED");
  // Leave the workers idle for the other tests.
  ASSERT_EQ(c.Sbp("cancel " + id).exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return c.State(id) == "CANCELLED"; }, seconds(20)));
}

}  // namespace
}  // namespace sbp::testing
