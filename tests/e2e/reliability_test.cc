// Failures that real clusters see, with real processes: a partitioned
// (paused) worker that fences itself, one run directory per job and
// resume_from, a full disk during a checkpoint (STORAGE, retried with
// backoff), and a diverging run (DIVERGED, not retried).
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <regex>

#include "absl/strings/str_format.h"
#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

// A tiny SFT spec with a constant learning rate (so that a run cut in two
// equals one run) and `extra` lines appended.
std::string Spec(const std::string& name, int steps, const std::string& extra) {
  return absl::StrCat("name: ", name,
                      "\nmodel: model\ndata: data.jsonl\nobjective: sft\nseq_len: 16\n"
                      "streambp: {mode: stream, chunk_tokens: 4, logits_chunk_tokens: 4}\n"
                      "train: {steps: ",
                      steps, ", sequences_per_step: 8, lr: 1.0e-2, schedule: constant}\n", extra);
}

std::vector<nlohmann::json> MetricLines(const std::string& path, std::string* raw = nullptr) {
  const std::string text = ReadAll(path);
  if (raw != nullptr) *raw = text;
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line, nullptr, false));
  return lines;
}

std::string WorkerNameOf(Cluster& c, const std::string& job_id) {
  const nlohmann::json job = c.GetJob(job_id);
  const auto workers = nlohmann::json::parse(c.Sbp("workers -o json").out, nullptr, false);
  for (const auto& w : workers["workers"]) {
    if (w["id"] == job["worker_ids"][0]) return w["name"];
  }
  return "";
}

// SIGSTOP the worker past its lease, then SIGCONT: the coordinator retries
// the job on the other worker; the paused worker, on waking, finds its lease
// lapsed and writes nothing more; the run reads as one clean run.
TEST(ReliabilityTest, APausedWorkerFencesItselfAndTheRetryCompletes) {
  constexpr int kSteps = 40, kEvery = 4;
  Cluster c("partition");
  c.StartCoordinator(/*lease_seconds=*/2);
  c.StartWorker("w0");
  c.StartWorker("w1");
  ASSERT_TRUE(
      WaitFor([&] { return c.Sbp("workers").out.find("w1") != std::string::npos; }, seconds(20)));
  std::string spec = c.Spec("partition", kSteps, 64, kEvery);
  const std::string id = c.Submit(c.WriteSpec("partition", spec));
  ASSERT_TRUE(WaitFor([&] { return c.Step(id) >= kEvery + 1; }, seconds(60))) << c.Logs();
  const std::string victim = WorkerNameOf(c, id);
  ASSERT_FALSE(victim.empty());
  ::kill(c.worker(victim).pid(), SIGSTOP);
  // Past the lease: the coordinator gives up on it and retries elsewhere.
  ASSERT_TRUE(WaitFor([&] { return c.GetJob(id).value("attempt", 0) == 2; }, seconds(30)))
      << c.Logs();
  std::this_thread::sleep_for(seconds(3));
  ::kill(c.worker(victim).pid(), SIGCONT);

  const CommandResult watch = c.Sbp("watch " + id);
  EXPECT_EQ(watch.exit_code, 0) << watch.err << c.Logs();
  EXPECT_EQ(c.State(id), "SUCCEEDED");
  EXPECT_TRUE(c.worker(victim).running()) << "the paused worker must survive";

  std::string raw;
  const auto lines = MetricLines((c.dir() / "runs/partition/metrics.jsonl").string(), &raw);
  EXPECT_EQ(raw.find('\0'), std::string::npos) << "NUL bytes in metrics.jsonl";
  ASSERT_EQ(lines.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(lines[i].value("step", -1), i + 1);

  // Checkpoints after the takeover are all attempt 2's; none is a stale one.
  const std::string events = c.Sbp("events " + id).out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(events, m,
                                std::regex("attempt 2 started .*resuming after step "
                                           "(\\d+)")))
      << events;
  const int64_t resumed = std::stoll(m[1]);
  for (int step = kEvery; step <= kSteps; step += kEvery) {
    const fs::path state = c.dir() / "runs/partition/checkpoints" /
                           absl::StrFormat("step-%08d", step) / "trainer_state/trainer_state.json";
    if (!fs::exists(state)) continue;  // pruned or never written
    const auto j = nlohmann::json::parse(ReadAll(state.string()), nullptr, false);
    EXPECT_EQ(j.value("attempt", 0), step <= resumed ? 1 : 2) << state;
  }
  for (const auto& entry : fs::directory_iterator(c.dir() / "runs/partition/checkpoints")) {
    EXPECT_NE(entry.path().filename().string().rfind(".tmp-", 0), 0u)
        << "staging left behind: " << entry.path();
  }
  // The paused worker said why it stopped, and is idle again.
  EXPECT_NE(ReadAll((c.dir() / (victim + ".log")).string()).find("lease"), std::string::npos)
      << c.Logs();
  EXPECT_TRUE(WaitFor(
      [&] {
        const auto j = nlohmann::json::parse(c.Sbp("workers -o json").out, nullptr, false);
        for (const auto& w : j["workers"]) {
          if (w["name"] == victim) return w.value("state", "") == "idle";
        }
        return false;
      },
      seconds(20)))
      << c.Sbp("workers").out;
}

// The same spec twice, with the default checkpoint.dir: two runs from step
// 1. Then a third job with resume_from continues the first bit for bit, and
// a job pointed at another job's directory is refused.
TEST(ReliabilityTest, OneRunDirectoryPerJobAndExplicitResume) {
  Cluster c("run_dirs");
  c.StartCoordinator();
  c.StartWorker("w0");
  ASSERT_TRUE(
      WaitFor([&] { return c.Sbp("workers").out.find("w0") != std::string::npos; }, seconds(20)));
  const std::string file = c.WriteSpec("short", Spec("short", 3, ""));
  const std::string first = c.Submit(file), second = c.Submit(file);
  for (const std::string& id : {first, second}) {
    EXPECT_EQ(c.Sbp("watch " + id).exit_code, 0) << c.Logs();
    const auto lines = MetricLines((c.dir() / "runs" / id / "metrics.jsonl").string());
    ASSERT_EQ(lines.size(), 3u) << id;
    EXPECT_EQ(lines.front().value("step", -1), 1) << id;
  }

  // resume_from the first run to step 6 == one run of 6 steps.
  const std::string straight = c.Submit(c.WriteSpec("straight", Spec("straight", 6, "")));
  const std::string resumed = c.Submit(
      c.WriteSpec("resumed", Spec("resumed", 6, absl::StrCat("resume_from: runs/", first, "\n"))));
  for (const std::string& id : {straight, resumed}) {
    EXPECT_EQ(c.Sbp("watch " + id).exit_code, 0) << c.Logs();
  }
  auto weights = [&](const std::string& id) {
    return ReadAll(
        (c.dir() / "runs" / id / "checkpoints/step-00000006/model.safetensors").string());
  };
  EXPECT_FALSE(weights(straight).empty());
  EXPECT_EQ(weights(straight), weights(resumed));
  EXPECT_NE(c.Sbp("events " + resumed).out.find("resume_from"), std::string::npos);
  EXPECT_EQ(MetricLines((c.dir() / "runs" / resumed / "metrics.jsonl").string())
                .front()
                .value("step", -1),
            4);

  // Another job's directory, without resume_from: refused, nothing written.
  const std::string before = ReadAll((c.dir() / "runs" / first / "metrics.jsonl").string());
  const std::string intruder = c.Submit(c.WriteSpec(
      "intruder", Spec("intruder", 3, absl::StrCat("checkpoint: {dir: runs/", first, "}\n"))));
  EXPECT_NE(c.Sbp("watch " + intruder).exit_code, 0);
  const nlohmann::json job = c.GetJob(intruder);
  EXPECT_EQ(job["state"], "FAILED") << job.dump(1);
  EXPECT_EQ(job["failure_class"], "BAD_INPUT") << job.dump(1);
  EXPECT_NE(job.dump().find("resume_from"), std::string::npos) << job.dump(1);
  EXPECT_EQ(ReadAll((c.dir() / "runs" / first / "metrics.jsonl").string()), before);
}

// A small filesystem mounted for the run (tmpfs; skipped where mounting is
// not allowed).
class SmallFilesystem {
 public:
  SmallFilesystem(const fs::path& dir, const std::string& size) : dir_(dir) {
    fs::create_directories(dir);
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~SmallFilesystem() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  bool Resize(const std::string& size) {
    return ::mount("tmpfs", dir_.c_str(), "tmpfs", MS_REMOUNT, ("size=" + size).c_str()) == 0;
  }

 private:
  fs::path dir_;
  bool mounted_ = false;
};

// ENOSPC while a checkpoint is written: class STORAGE, the staging is
// removed, the job waits (backoff) and succeeds once there is room.
TEST(ReliabilityTest, AFullDiskIsAStorageFailureRetriedOnceThereIsRoom) {
  Cluster c("storage");
  SmallFilesystem disk(c.dir() / "small", "96k");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here";
  c.StartCoordinator();
  c.StartWorker("w0");
  ASSERT_TRUE(
      WaitFor([&] { return c.Sbp("workers").out.find("w0") != std::string::npos; }, seconds(20)));
  const std::string id = c.Submit(c.WriteSpec(
      "full", Spec("full", 4, "checkpoint: {every_steps: 2, dir: small/run}\nmax_restarts: 3\n")));
  ASSERT_TRUE(
      WaitFor([&] { return c.GetJob(id).value("failure_class", "") == "STORAGE"; }, seconds(60)))
      << c.GetJob(id).dump(1) << c.Logs();
  const std::string events = c.Sbp("events " + id).out;
  EXPECT_NE(events.find("No space left on device"), std::string::npos) << events;
  EXPECT_NE(events.find("free of"), std::string::npos) << events;
  EXPECT_NE(events.find("storage backoff"), std::string::npos) << events;
  for (const auto& entry : fs::directory_iterator(c.dir() / "small/run/checkpoints")) {
    EXPECT_NE(entry.path().filename().string().rfind(".tmp-", 0), 0u) << entry.path();
  }
  ASSERT_TRUE(disk.Resize("64m"));
  const CommandResult watch = c.Sbp("watch " + id);
  EXPECT_EQ(watch.exit_code, 0) << watch.err << c.Logs();
  EXPECT_EQ(c.State(id), "SUCCEEDED");
  EXPECT_TRUE(fs::exists(c.dir() / "small/run/checkpoints/step-00000004/model.safetensors"));
}

// lr 1e30 makes the loss non-finite by step 2: DIVERGED, at that step, with
// no retry.
TEST(ReliabilityTest, ADivergingRunFailsAsDivergedWithoutRetry) {
  Cluster c("diverged");
  c.StartCoordinator();
  c.StartWorker("w0");
  ASSERT_TRUE(
      WaitFor([&] { return c.Sbp("workers").out.find("w0") != std::string::npos; }, seconds(20)));
  std::string spec = Spec("diverged", 10, "max_restarts: 3\n");
  spec.replace(spec.find("lr: 1.0e-2"), 10, "lr: 1.0e+30");
  const std::string id = c.Submit(c.WriteSpec("diverged", spec));
  EXPECT_NE(c.Sbp("watch " + id).exit_code, 0);
  const nlohmann::json job = c.GetJob(id);
  EXPECT_EQ(job["state"], "FAILED") << job.dump(1);
  EXPECT_EQ(job["failure_class"], "DIVERGED") << job.dump(1);
  EXPECT_EQ(job.value("attempt", 0), 1) << "no retry";
  const std::string events = c.Sbp("events " + id).out;
  EXPECT_NE(events.find("diverged at step 2"), std::string::npos) << events;
  EXPECT_EQ(events.find("RETRYING"), std::string::npos) << events;
}

}  // namespace
}  // namespace sbp::testing
