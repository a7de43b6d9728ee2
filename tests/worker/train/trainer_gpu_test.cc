// The training loop on a GPU (skipped without a CUDA device): the same
// trainer as on the CPU, with a bf16 compute copy, fp32 masters and
// moments, and NCCL under ZeRO-2.
//
// Tolerances. bf16 keeps 8 significant bits: each stored weight and
// activation is off by up to 2^-9 (0.2%) relative. On the tiny model (two
// layers, 24-token sequences) the loss of a bf16 forward differs from the
// fp32 one by well under 1%; over 20 AdamW steps at lr 1e-2 the two runs
// take slightly different paths, so each step's loss must agree within 5%
// of the fp32 loss plus 0.02 nats, both curves must fall by the same
// factor within 10%, and a resumed bf16 run must be bit-identical (the
// masters and moments are fp32 in the checkpoint).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/device_info.h"
#include "tests/worker/train/trainer_fixture.h"
#include "worker/dist/connect.h"
#include "worker/model/model_config.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

class TrainerGpuTest : public train_testing::TrainerFixture {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    TrainerFixture::SetUp();
  }
  JobSpec GpuSpec(const std::string& name, Precision precision) {
    JobSpec spec = Spec(name);
    spec.resources.device = DeviceKind::kCuda;
    spec.train.precision = precision;
    return spec;
  }
  static TrainOptions OnGpu() {
    TrainOptions options;
    options.device = "cuda:0";
    return options;
  }
};

TEST_F(TrainerGpuTest, Bf16OnTheGpuFollowsFp32OnTheCpu) {
  JobSpec cpu = Spec("cpu-fp32");
  cpu.train.steps = 20;
  JobSpec gpu = GpuSpec("gpu-bf16", Precision::kBf16);
  gpu.train.steps = 20;
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
  const double fall_cpu = a.back()["loss"].get<double>() / a.front()["loss"].get<double>();
  const double fall_gpu = b.back()["loss"].get<double>() / b.front()["loss"].get<double>();
  EXPECT_LT(fall_gpu, 0.9);
  EXPECT_NEAR(fall_gpu, fall_cpu, 0.1 * fall_cpu + 0.01);
  // The run's memory is the GPU's: its allocator saw at least the bf16
  // weights and the f32 gradients (6 bytes a parameter).
  auto config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  EXPECT_GE(b.back()["peak_bytes"].get<int64_t>(), 6 * ParameterCount(*config));
  // The checkpoint loads as a model (the tiny model's own dtype, f32).
  CpuAllocator allocator;
  EXPECT_TRUE(LoadModelDirectory(CheckpointPath(gpu.checkpoint.dir, 20), allocator).ok());
}

TEST_F(TrainerGpuTest, Fp32OnTheGpuMatchesTheCpu) {
  JobSpec cpu = Spec("cpu");
  cpu.train.steps = 5;
  JobSpec gpu = GpuSpec("gpu-fp32", Precision::kFp32);
  gpu.train.steps = 5;
  ASSERT_TRUE(RunTraining(cpu, {}, nullptr).ok());
  auto summary = RunTraining(gpu, OnGpu(), nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const auto a = Metrics(cpu), b = Metrics(gpu);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(),
                1e-4 * a[i]["loss"].get<double>())
        << "step " << i + 1;
  }
}

TEST_F(TrainerGpuTest, ABf16ResumeIsBitIdentical) {
  JobSpec straight = GpuSpec("straight", Precision::kBf16);
  ASSERT_TRUE(RunTraining(straight, OnGpu(), nullptr).ok());
  JobSpec interrupted = GpuSpec("interrupted", Precision::kBf16);
  TrainOptions stop = OnGpu();
  stop.stop_after_step = 7;
  ASSERT_TRUE(RunTraining(interrupted, stop, nullptr).ok());
  auto resumed = RunTraining(interrupted, OnGpu(), nullptr);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->first_step, 8);
  EXPECT_EQ(FinalWeights(straight), FinalWeights(interrupted));
  EXPECT_EQ(FinalStateFile(straight, "optimizer.safetensors"),
            FinalStateFile(interrupted, "optimizer.safetensors"));
  const auto a = Metrics(straight), b = Metrics(interrupted);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;
}

// ZeRO-2 over NCCL on one GPU (a world of one rank): the one-layer cache is
// reduce-scattered into the fp32 gradient shard on the communicator's
// stream, the master shard is cast into the bf16 copy and all-gathered. The
// same sums grouped per pass: the losses agree with the plain run to bf16
// rounding of the updated weights.
TEST_F(TrainerGpuTest, NcclZero2OnOneRankMatchesThePlainGpuRun) {
  JobSpec plain = GpuSpec("plain", Precision::kBf16);
  plain.train.steps = 5;
  ASSERT_TRUE(RunTraining(plain, OnGpu(), nullptr).ok());
  JobSpec zero = GpuSpec("nccl-one-rank", Precision::kBf16);
  zero.train.steps = 5;
  const std::string rendezvous = (root_ / "rendezvous").string();
  fs::create_directories(rendezvous);
  TrainOptions options = OnGpu();
  options.connect = [&](Backend& backend) {
    return ConnectThroughDirectory(rendezvous, backend, {0, 1});
  };
  auto summary = RunTraining(zero, options, nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const auto a = Metrics(plain), b = Metrics(zero);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(),
                5e-3 * a[i]["loss"].get<double>())
        << "step " << i + 1;
  }
}

}  // namespace
}  // namespace sbp
