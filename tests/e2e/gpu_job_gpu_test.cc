// A GPU job through the service (skipped where nvidia-smi sees no GPU): a
// coordinator, a GPU worker (`sbp-worker --device cuda:0`, advertising the
// device's memory) and a CPU worker; a bf16 job with resources.device cuda
// is scheduled on the GPU worker only and trains there to an HF checkpoint,
// and a job that no GPU can hold is refused at submit with the planner's
// figures.
#include <gtest/gtest.h>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

bool HaveGpu() {
  const CommandResult r = RunCommand("nvidia-smi -L", std::filesystem::temp_directory_path());
  return r.exit_code == 0 && r.out.find("GPU") != std::string::npos;
}

class GpuJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "nvidia-smi sees no GPU";
  }
};

TEST_F(GpuJobTest, ABf16JobRunsOnTheGpuWorkerAndTooBigAJobIsRefused) {
  Cluster c("gpu_job");
  c.StartCoordinator();
  c.StartWorker("gpu", {"--device", "cuda:0", "--memory", "16GiB"});
  c.StartWorker("cpu");
  ASSERT_TRUE(WaitFor(
      [&] {
        const auto j = nlohmann::json::parse(c.Sbp("workers -o json").out, nullptr, false);
        return j.is_object() && j.contains("workers") && j["workers"].size() == 2;
      },
      seconds(60)))
      << c.Logs();

  // bf16 precision: the spec's train block is inline.
  std::string text = c.Spec("gpu-bf16", 6, 2, 3, "resources: {device: cuda}\n");
  text.replace(text.find("lr: 1.0e-2}"), 11, "lr: 1.0e-2, precision: bf16}");
  const std::string id = c.Submit(c.WriteSpec("gpu-bf16", text));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor([&] { return c.State(id) == "SUCCEEDED"; }, seconds(120)))
      << c.State(id) << "\n"
      << c.Logs();
  const nlohmann::json job = c.GetJob(id);
  ASSERT_TRUE(job.contains("workerIds") || job.contains("worker_ids")) << job.dump();
  const auto& workers = job.contains("workerIds") ? job["workerIds"] : job["worker_ids"];
  const auto listed = nlohmann::json::parse(c.Sbp("workers -o json").out, nullptr, false);
  for (const auto& w : listed["workers"]) {
    if (w.value("id", "") == workers[0].get<std::string>()) {
      EXPECT_EQ(w.value("name", ""), "gpu") << w.dump();
      EXPECT_EQ(w.value("device", ""), "CUDA") << w.dump();
    }
  }
  EXPECT_TRUE(std::filesystem::exists(c.dir() /
                                      "runs/gpu-bf16/checkpoints/step-00000006/model.safetensors"));

  // The GPU worker's 16 GiB cannot hold 64M tokens of this model's layer
  // inputs and K/V, and the CPU worker does not count for a cuda job.
  std::string huge = c.Spec("huge", 1, 1, 0, "resources: {device: cuda}\n");
  huge.replace(huge.find("seq_len: 16"), 11, "seq_len: 67108864");
  const CommandResult refused = c.Sbp("submit " + c.WriteSpec("huge", huge));
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace sbp::testing
