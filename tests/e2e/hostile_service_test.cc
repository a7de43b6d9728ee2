// Hostile input through the service, with real processes: the coordinator
// answers a job whose config.json is a FIFO or /dev/zero with
// INVALID_ARGUMENT at once and stays small; the inputs that used to crash a
// worker (a huge sequences_per_step, a JSONL line nested 200,000 deep) end
// their job FAILED as BAD_INPUT with no retry, and the worker lives on.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

int64_t RssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

TEST(HostileServiceTest, TheCoordinatorRefusesHostileModelFilesAtOnce) {
  Cluster c("hostile_service");
  c.StartCoordinator(3, {"--work-dir", c.dir().string()});
  std::filesystem::create_directories(c.dir() / "fifo-model");
  ASSERT_EQ(::mkfifo((c.dir() / "fifo-model/config.json").c_str(), 0644), 0);
  std::filesystem::create_directories(c.dir() / "zero-model");
  std::filesystem::create_symlink("/dev/zero", c.dir() / "zero-model/config.json");
  for (const std::string model : {"fifo-model", "zero-model"}) {
    std::string spec = c.Spec("hostile", 2, 2, 0);
    spec.replace(spec.find("model: model"), 12, "model: " + model);
    const auto start = std::chrono::steady_clock::now();
    const CommandResult r = c.Sbp("submit " + c.WriteSpec("hostile-" + model, spec));
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(r.exit_code, 2) << model << ": " << r.err;
    // A FIFO in the work directory is not a regular file; a link out of it
    // (to /dev/zero) is refused before anything is opened.
    EXPECT_NE(r.err.find(model == "fifo-model" ? "not a regular file" : "leads outside"),
              std::string::npos)
        << r.err;
    EXPECT_LT(took, seconds(1)) << model;
  }
  EXPECT_LT(RssBytes(c.coordinator().pid()), int64_t{200} << 20);
  EXPECT_TRUE(c.coordinator().running());
}

TEST(HostileServiceTest, CrashingInputsFailTheJobNotTheWorker) {
  Cluster c("hostile_worker");
  c.StartCoordinator();
  c.StartWorker("w0");
  ASSERT_TRUE(
      WaitFor([&] { return c.Sbp("workers").out.find("w0") != std::string::npos; }, seconds(20)));
  // A line nested 200,000 brackets deep.
  WriteFile(c.dir() / "deep.jsonl", std::string(200000, '[') + std::string(200000, ']') + "\n");
  std::string deep = c.Spec("deep", 2, 2, 0);  // max_restarts: 2
  deep.replace(deep.find("data: data.jsonl"), 16, "data: deep.jsonl");
  const std::string id = c.Submit(c.WriteSpec("deep", deep));
  ASSERT_FALSE(id.empty());
  EXPECT_NE(c.Sbp("watch " + id).exit_code, 0);
  const nlohmann::json job = c.GetJob(id);
  EXPECT_EQ(job.value("state", ""), "FAILED") << job.dump(1);
  EXPECT_EQ(job.value("failure_class", ""), "BAD_INPUT") << job.dump(1);
  EXPECT_EQ(job.value("attempt", 0), 1) << "no retry";
  EXPECT_EQ(c.Sbp("events " + id).out.find("RETRYING"), std::string::npos);
  EXPECT_TRUE(c.worker("w0").running()) << c.Logs();
  // The huge batch is refused before it reaches any worker.
  std::string text = c.Spec("huge", 2, 2, 0);
  text.replace(text.find("sequences_per_step: 2"), 21, "sequences_per_step: 1152921504606846977");
  const CommandResult refused = c.Sbp("submit " + c.WriteSpec("huge", text));
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("train.sequences_per_step"), std::string::npos) << refused.err;
  EXPECT_TRUE(c.worker("w0").running());
}

}  // namespace
}  // namespace sbp::testing
