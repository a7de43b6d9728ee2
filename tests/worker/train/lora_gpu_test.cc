// LoRA on a GPU (skipped without a CUDA device): the bf16 frozen base with
// bf16 adapter compute copies, fp32 adapter masters and moments follows the
// fp32 CPU run, an fp32 GPU run matches it closely, and the checkpoint is an
// f32 PEFT adapter either way. Tolerances as in trainer_gpu_test.cc.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/device_info.h"
#include "tests/worker/train/trainer_fixture.h"
#include "worker/engine/lora_store.h"
#include "worker/model/safetensors.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

class LoraGpuTest : public train_testing::TrainerFixture {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    TrainerFixture::SetUp();
  }
  JobSpec LoraSpec(const std::string& name, int64_t steps) {
    JobSpec spec = Spec(name);
    spec.train.steps = steps;
    spec.lora.r = 4;
    spec.lora.alpha = 8;
    spec.lora.target_modules = LoraModuleNames();
    spec.lora.init_seed = 5;
    return spec;
  }
  static TrainOptions OnGpu() {
    TrainOptions options;
    options.device = "cuda:0";
    return options;
  }
};

TEST_F(LoraGpuTest, Bf16OnTheGpuFollowsFp32OnTheCpu) {
  JobSpec cpu = LoraSpec("lora-cpu", 20);
  JobSpec gpu = LoraSpec("lora-gpu-bf16", 20);
  gpu.resources.device = DeviceKind::kCuda;
  gpu.train.precision = Precision::kBf16;
  ASSERT_TRUE(RunTraining(cpu, {}, nullptr).ok());
  auto summary = RunTraining(gpu, OnGpu(), nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const auto a = Metrics(cpu), b = Metrics(gpu);
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i]["loss"], y = b[i]["loss"];
    std::printf("step %zu: cpu fp32 %.5f, gpu bf16 %.5f\n", i + 1, x, y);
    EXPECT_NEAR(y, x, 0.05 * x + 0.02) << "step " << i + 1;
  }
  auto file =
      SafetensorsFile::Open(CheckpointPath(gpu.checkpoint.dir, 20) + "/adapter_model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*file->dtype(PeftAdapterKey(0, "q_proj", true)), SafetensorsDType::kF32);
}

TEST_F(LoraGpuTest, Fp32OnTheGpuMatchesTheCpu) {
  JobSpec cpu = LoraSpec("lora-cpu-5", 5);
  JobSpec gpu = LoraSpec("lora-gpu-fp32", 5);
  gpu.resources.device = DeviceKind::kCuda;
  ASSERT_TRUE(RunTraining(cpu, {}, nullptr).ok());
  auto summary = RunTraining(gpu, OnGpu(), nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const auto a = Metrics(cpu), b = Metrics(gpu);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(),
                1e-3 * a[i]["loss"].get<double>())
        << "step " << i + 1;
  }
}

}  // namespace
}  // namespace sbp
