// The agent against an in-process fake coordinator: a job runs to its outcome
// with progress every step and checkpoint notices; cancellation, stale
// attempts, a forgetful or restarted coordinator, a bad spec, the memory
// budget and a wrong token each end the way the protocol says.
#include "worker/agent/worker_agent.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "kernels/allocator.h"
#include "prometheus/text_serializer.h"
#include "tests/worker/agent/fake_coordinator.h"
#include "worker/agent/worker_metrics.h"
#include "worker/model/model_config.h"
#include "worker/model/model_io.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;

// Runs an agent on its own thread; stops and joins it on destruction.
class AgentRunner {
 public:
  explicit AgentRunner(AgentOptions options) {
    auto agent = WorkerAgent::Create(std::move(options));
    EXPECT_TRUE(agent.ok()) << agent.status();
    if (!agent.ok()) return;
    agent_ = *std::move(agent);
    thread_ = std::thread([this] { status_ = agent_->Run(); });
  }
  ~AgentRunner() { Join().IgnoreError(); }
  absl::Status Join() {
    if (agent_) agent_->Stop();
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  WorkerAgent* agent() { return agent_.get(); }

 private:
  std::unique_ptr<WorkerAgent> agent_;
  std::thread thread_;
  absl::Status status_;
};

class WorkerAgentTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(::testing::TempDir()) / "worker_agent_test");
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    auto config = PresetConfig("tiny-qwen3");
    ASSERT_TRUE(config.ok());
    CpuAllocator allocator;
    auto weights = InitModelWeights(*config, 3, allocator);
    ASSERT_TRUE(weights.ok());
    ASSERT_TRUE(SaveModelDirectory((*dir_ / "model").string(), *weights, DType::kF32).ok());
    std::ofstream data(*dir_ / "data.jsonl");
    data << "{\"prompt_ids\": [1, 17, 18, 19, 2], \"completion_ids\": [19, 18, 17, 3]}\n"
            "{\"input_ids\": [1, 20, 21, 2, 21, 20, 3]}\n";
  }

  static std::string Spec(const std::string& run, int steps, const std::string& extra = "") {
    return "name: " + run +
           "\nmodel: model\ndata: data.jsonl\nobjective: sft\nseq_len: 16\n"
           "streambp: {mode: stream, chunk_tokens: 4, logits_chunk_tokens: 4}\n"
           "train: {steps: " +
           std::to_string(steps) +
           ", sequences_per_step: 2, lr: 1.0e-2}\n"
           "checkpoint: {every_steps: 2, dir: runs/" +
           run + "}\n" + extra;
  }

  static v1::Assignment Assign(const std::string& job, int attempt, const std::string& spec) {
    v1::Assignment a;
    a.set_job_id(job);
    a.set_attempt(attempt);
    a.set_rank(0);
    a.set_world_size(1);
    a.set_spec_yaml(spec);
    return a;
  }

  AgentOptions Options(const FakeCoordinator& fake) {
    AgentOptions o;
    o.coordinator = fake.address();
    o.token = "secret";
    o.name = "test-worker";
    o.memory_bytes = int64_t{1} << 30;
    o.work_dir = dir_->string();
    return o;
  }

  static fs::path* dir_;
};

fs::path* WorkerAgentTest::dir_ = nullptr;

int64_t LastStep(const std::vector<v1::ReportProgressRequest>& reports) {
  int64_t step = 0;
  for (const auto& r : reports) step = std::max(step, r.progress().step());
  return step;
}

std::vector<std::string> Checkpoints(const std::vector<v1::ReportProgressRequest>& reports) {
  std::vector<std::string> out;
  for (const auto& r : reports) {
    if (!r.checkpoint().empty()) out.push_back(fs::path(r.checkpoint()).filename().string());
  }
  return out;
}

TEST_F(WorkerAgentTest, RunsAJobReportingEveryStepAndTheOutcome) {
  FakeCoordinator fake;
  fake.RequireToken("secret");
  fake.Enqueue(Assign("job-1", 1, Spec("ok", 6)));
  AgentRunner runner(Options(fake));
  ASSERT_TRUE(fake.WaitForFinishes(1, absl::Seconds(60)));

  const auto registrations = fake.registrations();
  ASSERT_FALSE(registrations.empty());
  EXPECT_EQ(registrations[0].name(), "test-worker");
  EXPECT_EQ(registrations[0].device(), v1::DEVICE_KIND_CPU);
  EXPECT_EQ(registrations[0].memory_bytes(), int64_t{1} << 30);
  EXPECT_FALSE(registrations[0].version().empty());
  EXPECT_TRUE(registrations[0].worker_id().empty());

  const auto reports = fake.reports();
  EXPECT_EQ(LastStep(reports), 6);
  int64_t previous = 0;
  for (const auto& r : reports) {
    EXPECT_EQ(r.worker_id(), "w1");
    EXPECT_EQ(r.job_id(), "job-1");
    EXPECT_EQ(r.attempt(), 1);
    EXPECT_GE(r.progress().step(), previous);
    previous = r.progress().step();
    if (r.progress().step() > 0) {
      EXPECT_EQ(r.progress().total_steps(), 6);
      EXPECT_GT(r.progress().loss(), 0);
      EXPECT_GT(r.progress().tokens_per_second(), 0);
      EXPECT_GT(r.progress().peak_bytes(), 0);
      EXPECT_TRUE(r.progress().has_updated_at());
    }
  }
  EXPECT_EQ(Checkpoints(reports),
            (std::vector<std::string>{"step-00000002", "step-00000004", "step-00000006"}));
  EXPECT_NE(reports.front().message().find("attempt 1 started"), std::string::npos);

  const auto finishes = fake.finishes();
  ASSERT_EQ(finishes.size(), 1u);
  EXPECT_EQ(finishes[0].outcome(), v1::OUTCOME_SUCCEEDED);
  EXPECT_EQ(finishes[0].job_id(), "job-1");
  EXPECT_EQ(finishes[0].attempt(), 1);
  for (const std::string& auth : fake.authorizations()) EXPECT_EQ(auth, "Bearer secret");
  EXPECT_TRUE(runner.Join().ok());
}

TEST_F(WorkerAgentTest, CancelStopsAfterTheCurrentStepWithACheckpoint) {
  FakeCoordinator fake;
  fake.CancelAfterStep(2);
  fake.Enqueue(Assign("job-c", 1, Spec("cancel", 1000)));
  AgentRunner runner(Options(fake));
  ASSERT_TRUE(fake.WaitForFinishes(1, absl::Seconds(60)));
  const auto finishes = fake.finishes();
  EXPECT_EQ(finishes[0].outcome(), v1::OUTCOME_CANCELLED);
  const int64_t last = LastStep(fake.reports());
  EXPECT_GE(last, 2);
  EXPECT_LT(last, 20);
  EXPECT_FALSE(Checkpoints(fake.reports()).empty());
}

TEST_F(WorkerAgentTest, StaleAttemptStopsWithoutAnOutcomeAndTheWorkerGoesOn) {
  FakeCoordinator fake;
  fake.SetCurrentAttempt(2);
  fake.Enqueue(Assign("job-s", 1, Spec("stale", 1000)));
  fake.Enqueue(Assign("job-next", 2, Spec("next", 2)));
  AgentRunner runner(Options(fake));
  ASSERT_TRUE(fake.WaitForFinishes(1, absl::Seconds(60)));
  const auto finishes = fake.finishes();
  ASSERT_EQ(finishes.size(), 1u);
  EXPECT_EQ(finishes[0].job_id(), "job-next");
  EXPECT_EQ(finishes[0].outcome(), v1::OUTCOME_SUCCEEDED);
  int64_t stale_last = 0;
  for (const auto& r : fake.reports()) {
    if (r.job_id() == "job-s") stale_last = std::max(stale_last, r.progress().step());
  }
  EXPECT_LT(stale_last, 20);
}

TEST_F(WorkerAgentTest, HeartbeatStopAttemptsEndsTheRun) {
  FakeCoordinator fake;
  fake.StopAttempt("job-h", 1);
  fake.Enqueue(Assign("job-h", 1, Spec("hb-stop", 100000)));
  fake.Enqueue(Assign("job-after", 1, Spec("hb-after", 2)));
  AgentRunner runner(Options(fake));
  ASSERT_TRUE(fake.WaitForFinishes(1, absl::Seconds(60)));
  EXPECT_EQ(fake.finishes()[0].job_id(), "job-after");
}

TEST_F(WorkerAgentTest, StopEndsTheRunWithACheckpointButNoOutcome) {
  FakeCoordinator fake;
  fake.Enqueue(Assign("job-stop", 1, Spec("stop", 100000)));
  AgentRunner runner(Options(fake));
  ASSERT_TRUE(fake.WaitForReports(3, absl::Seconds(60)));
  EXPECT_TRUE(runner.Join().ok());
  EXPECT_TRUE(fake.finishes().empty());
  const auto reports = fake.reports();
  const std::vector<std::string> checkpoints = Checkpoints(reports);
  ASSERT_FALSE(checkpoints.empty());
  EXPECT_EQ(checkpoints.back(), absl::StrFormat("step-%08d", LastStep(reports)));
}

TEST_F(WorkerAgentTest, ReRegistersUnderItsOldIdWhenForgotten) {
  FakeCoordinator fake;
  AgentRunner runner(Options(fake));
  ASSERT_TRUE(fake.WaitForRegistrations(1, absl::Seconds(10)));
  fake.ForgetWorkers();
  ASSERT_TRUE(fake.WaitForRegistrations(2, absl::Seconds(10)));
  const auto registrations = fake.registrations();
  EXPECT_EQ(registrations[1].worker_id(), "w1");
  EXPECT_EQ(registrations[1].name(), "test-worker");
  const auto heartbeats = fake.heartbeats();
  ASSERT_FALSE(heartbeats.empty());
  EXPECT_EQ(heartbeats[0].worker_id(), "w1");
  EXPECT_EQ(heartbeats[0].memory().capacity_bytes(), int64_t{1} << 30);
}

TEST_F(WorkerAgentTest, TrainsThroughACoordinatorRestart) {
  auto fake = std::make_unique<FakeCoordinator>();
  const int port = fake->port();
  fake->Enqueue(Assign("job-r", 1, Spec("restart", 40)));
  AgentRunner runner(Options(*fake));
  ASSERT_TRUE(fake->WaitForReports(3, absl::Seconds(60)));
  fake.reset();  // the coordinator dies mid-job
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto restarted = std::make_unique<FakeCoordinator>(port);
  restarted->ForgetWorkers();
  ASSERT_TRUE(restarted->WaitForFinishes(1, absl::Seconds(60)));
  EXPECT_EQ(restarted->finishes()[0].outcome(), v1::OUTCOME_SUCCEEDED);
  EXPECT_EQ(LastStep(restarted->reports()), 40);
  // The restarted coordinator gets the worker back under its old id (with the next
  // heartbeat, which may come after the job finished).
  ASSERT_TRUE(restarted->WaitForRegistrations(1, absl::Seconds(10)));
  const auto registrations = restarted->registrations();
  EXPECT_EQ(registrations[0].worker_id(), "w1");
}

TEST_F(WorkerAgentTest, BadSpecFailsAsBadInput) {
  FakeCoordinator fake;
  fake.Enqueue(Assign("job-b", 1, "name: x\nmodel: model\n"));
  fake.Enqueue(Assign(
      "job-m", 1, absl::StrReplaceAll(Spec("missing", 2), {{"model: model", "model: nowhere"}})));
  AgentRunner runner(Options(fake));
  ASSERT_TRUE(fake.WaitForFinishes(2, absl::Seconds(60)));
  for (const auto& f : fake.finishes()) {
    EXPECT_EQ(f.outcome(), v1::OUTCOME_FAILED) << f.job_id();
    EXPECT_EQ(f.failure_class(), v1::FAILURE_CLASS_BAD_INPUT) << f.job_id();
    EXPECT_FALSE(f.message().empty());
  }
  EXPECT_NE(fake.finishes()[1].message().find("nowhere"), std::string::npos);
}

TEST_F(WorkerAgentTest, MemoryCapacityIsTheBudget) {
  FakeCoordinator fake;
  fake.Enqueue(Assign("job-oom", 1, Spec("oom", 2)));
  AgentOptions options = Options(fake);
  options.memory_bytes = 64 << 10;  // far below the tiny model's footprint
  AgentRunner runner(options);
  ASSERT_TRUE(fake.WaitForFinishes(1, absl::Seconds(60)));
  EXPECT_EQ(fake.finishes()[0].outcome(), v1::OUTCOME_FAILED);
  EXPECT_EQ(fake.finishes()[0].failure_class(), v1::FAILURE_CLASS_OUT_OF_MEMORY)
      << fake.finishes()[0].message();
}

TEST_F(WorkerAgentTest, WrongTokenEndsRunWithUnauthenticated) {
  FakeCoordinator fake;
  fake.RequireToken("right");
  auto agent = WorkerAgent::Create(Options(fake));
  ASSERT_TRUE(agent.ok());
  const absl::Status status = (*agent)->Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
  EXPECT_NE(status.message().find("UNAUTHENTICATED"), std::string::npos);
}

TEST_F(WorkerAgentTest, RejectsCudaWithoutABackendAndZeroMemory) {
  AgentOptions o;
  o.coordinator = "127.0.0.1:1";
  o.memory_bytes = 0;
  EXPECT_EQ(WorkerAgent::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// GET http://address/metrics with a plain socket.
std::string HttpGet(const std::string& address, const std::string& path) {
  const size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: x\r\n\r\n";
  if (write(fd, request.data(), request.size()) < 0) return "";
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

TEST_F(WorkerAgentTest, ServesWorkerMetrics) {
  FakeCoordinator fake;
  fake.Enqueue(Assign("job-metrics", 1, Spec("metrics", 3)));
  AgentOptions options = Options(fake);
  options.metrics_listen = "127.0.0.1:0";
  AgentRunner runner(options);
  ASSERT_TRUE(fake.WaitForFinishes(1, absl::Seconds(60)));
  const std::string address = runner.agent()->metrics_address();
  ASSERT_FALSE(address.empty());
  EXPECT_NE(address, "127.0.0.1:0");
  const std::string text = HttpGet(address, "/metrics");
  for (const char* name :
       {"sbp_worker_memory_peak_bytes", "sbp_worker_memory_current_bytes",
        "sbp_worker_memory_capacity_bytes 1073741824",
        "sbp_train_tokens_total{job_id=\"job-metrics\"}",
        "sbp_train_tokens_per_second{job_id=\"job-metrics\"}",
        "sbp_train_step_seconds_bucket{job_id=\"job-metrics\"",
        "sbp_train_loss{job_id=\"job-metrics\"}", "sbp_train_mfu_ratio{job_id=\"job-metrics\"}",
        "sbp_train_step{job_id=\"job-metrics\"} 3"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
  }
  // An SFT job samples nothing online: no rollout series.
  EXPECT_EQ(text.find("sbp_rollout_"), std::string::npos) << text;
  EXPECT_EQ(text.find("sbp_train_compute_seconds_total"), std::string::npos) << text;
}

// The value of the sample `series` (name and labels, exactly) in `text`; -1
// when absent.
double Sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

// Online GRPO's rollout figures: per job, only for steps that report them,
// the step time split accumulating, and gone with the job's other series.
TEST(WorkerMetricsTest, RolloutSeriesOnlyForJobsThatSampleOnline) {
  auto metrics = WorkerMetrics::Create("", int64_t{1} << 30);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  auto scrape = [&] {
    return "\n" + prometheus::TextSerializer().Serialize((*metrics)->registry().Collect());
  };
  StepReport sft;
  sft.step = 1;
  sft.step_seconds = 0.5;
  (*metrics)->OnStep("job-sft", sft);
  std::string text = scrape();
  EXPECT_GE(Sample(text, "sbp_train_step{job_id=\"job-sft\"}"), 1) << text;
  EXPECT_EQ(text.find("sbp_rollout_"), std::string::npos) << text;
  EXPECT_EQ(text.find("sbp_train_compute_seconds_total"), std::string::npos) << text;

  StepReport grpo;
  grpo.step = 1;
  grpo.step_seconds = 2;
  grpo.rollout.present = true;
  grpo.rollout.reward_mean = 0.5;
  grpo.rollout.reward_std = 0.25;
  grpo.rollout.completion_length_mean = 37.5;
  grpo.rollout.completion_length_max = 64;
  grpo.rollout.truncated_fraction = 0.125;
  grpo.rollout.rollout_tokens = 600;
  grpo.rollout.rollout_tokens_per_second = 400;
  grpo.rollout.rollout_seconds = 1.5;
  grpo.rollout.train_seconds = 0.5;
  (*metrics)->OnStep("job-grpo", grpo);
  grpo.step = 2;
  grpo.rollout.reward_mean = 0.75;
  grpo.rollout.completion_length_max = 48;
  (*metrics)->OnStep("job-grpo", grpo);
  text = scrape();
  const std::string job = "{job_id=\"job-grpo\"}";
  EXPECT_DOUBLE_EQ(Sample(text, "sbp_rollout_reward_mean" + job), 0.75) << text;
  EXPECT_DOUBLE_EQ(Sample(text, "sbp_rollout_reward_std" + job), 0.25) << text;
  EXPECT_DOUBLE_EQ(Sample(text, "sbp_rollout_completion_length_mean" + job), 37.5) << text;
  EXPECT_DOUBLE_EQ(Sample(text, "sbp_rollout_completion_length_max" + job), 48) << text;
  EXPECT_DOUBLE_EQ(Sample(text, "sbp_rollout_truncated_ratio" + job), 0.125) << text;
  EXPECT_DOUBLE_EQ(Sample(text, "sbp_rollout_tokens_per_second" + job), 400) << text;
  EXPECT_DOUBLE_EQ(Sample(text, "sbp_rollout_seconds_total" + job), 3) << text;
  EXPECT_DOUBLE_EQ(Sample(text, "sbp_train_compute_seconds_total" + job), 1) << text;
  for (const char* type :
       {"sbp_rollout_reward_mean gauge", "sbp_rollout_reward_std gauge",
        "sbp_rollout_completion_length_mean gauge", "sbp_rollout_completion_length_max gauge",
        "sbp_rollout_truncated_ratio gauge", "sbp_rollout_tokens_per_second gauge",
        "sbp_rollout_seconds_total counter", "sbp_train_compute_seconds_total counter"}) {
    const std::string line = std::string("\n# TYPE ") + type + "\n";
    EXPECT_NE(text.find(line), std::string::npos) << line << text;
  }
  // The SFT job's series went when the GRPO job came.
  EXPECT_EQ(text.find("job-sft"), std::string::npos) << text;

  // The next job samples nothing online: the rollout series go with the last.
  (*metrics)->OnStep("job-sft-2", sft);
  text = scrape();
  EXPECT_EQ(text.find("sbp_rollout_"), std::string::npos) << text;
  EXPECT_EQ(text.find("sbp_train_compute_seconds_total"), std::string::npos) << text;
}

// The memory tiers: the worker registers what it offers them, hands it to
// the trainer, and reports where a job's checkpoints live, by step and on
// /metrics.
TEST_F(WorkerAgentTest, RegistersItsMemoryTiersAndReportsThem) {
  FakeCoordinator fake;
  const std::string spec =
      "name: tiers\nmodel: model\ndata: data.jsonl\nobjective: sft\nseq_len: 16\n"
      "streambp: {mode: stream, chunk_tokens: 4, logits_chunk_tokens: 4, "
      "offload: {checkpoints: host}}\n"
      "train: {steps: 2, sequences_per_step: 2, lr: 1.0e-2}\n"
      "checkpoint: {every_steps: 2, dir: runs/tiers}\n";
  fake.Enqueue(Assign("job-tiers", 1, spec));
  AgentOptions options = Options(fake);
  options.host_memory_bytes = int64_t{3} << 30;
  options.offload_disk_bytes = int64_t{5} << 30;
  options.metrics_listen = "127.0.0.1:0";
  AgentRunner runner(options);
  ASSERT_TRUE(fake.WaitForFinishes(1, absl::Seconds(60)));
  ASSERT_EQ(fake.finishes()[0].outcome(), v1::OUTCOME_SUCCEEDED) << fake.finishes()[0].message();

  const auto registrations = fake.registrations();
  ASSERT_FALSE(registrations.empty());
  EXPECT_EQ(registrations[0].host_memory_bytes(), int64_t{3} << 30);
  EXPECT_EQ(registrations[0].offload_disk_bytes(), int64_t{5} << 30);

  int stepped = 0;
  for (const auto& r : fake.reports()) {
    if (r.progress().step() == 0) continue;
    ++stepped;
    EXPECT_EQ(r.progress().checkpoint_tier(), "host");
    EXPECT_FALSE(r.progress().optimizer_offload());
    EXPECT_GT(r.progress().host_tier_peak_bytes(), 0);
    EXPECT_EQ(r.progress().disk_tier_bytes(), 0);
    EXPECT_GE(r.progress().offload_copy_bytes_per_second(), 0);
  }
  EXPECT_GT(stepped, 0);

  const std::string text = HttpGet(runner.agent()->metrics_address(), "/metrics");
  EXPECT_GT(Sample(text, "sbp_worker_memory_peak_bytes{tier=\"device\"}"), 0) << text;
  EXPECT_GT(Sample(text, "sbp_worker_memory_peak_bytes{tier=\"host\"}"), 0) << text;
  EXPECT_EQ(Sample(text, "sbp_worker_memory_peak_bytes{tier=\"disk\"}"), 0) << text;
  // The run is over: nothing is held in any tier.
  EXPECT_EQ(Sample(text, "sbp_worker_memory_current_bytes{tier=\"host\"}"), 0) << text;
  EXPECT_GT(Sample(text, "sbp_offload_copy_bytes_total"), 0) << text;
  EXPECT_GE(Sample(text, "sbp_offload_wait_seconds_total"), 0) << text;
  EXPECT_GE(Sample(text, "sbp_offload_copy_bytes_per_second"), 0) << text;
}

}  // namespace
}  // namespace sbp::testing
