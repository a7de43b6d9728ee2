// The mixed-precision bookkeeping of the training loop, on the CPU with f32
// compute: separate fp32 masters (what a bf16 job keeps) beside the compute
// copy, the cast after each step, masters in checkpoints and their resume,
// ZeRO-2 master shards owned rank by rank, and the device a job asks for.
// With f32 compute the cast is exact, so every comparison is bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/train/trainer_fixture.h"
#include "worker/dist/connect.h"
#include "worker/model/safetensors.h"
#include "worker/train/sharded_checkpoint.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

class MixedPrecisionTest : public train_testing::TrainerFixture {
 protected:
  static TrainOptions SeparateMasters() {
    TrainOptions options;
    options.separate_master = true;
    return options;
  }
  // The master tensors (fp32) of a checkpoint's optimizer file, by name.
  static std::vector<std::string> MasterNames(const std::string& path) {
    auto file = SafetensorsFile::Open(path);
    EXPECT_TRUE(file.ok()) << file.status();
    std::vector<std::string> names;
    if (!file.ok()) return names;
    for (const std::string& name : file->names()) {
      if (name.rfind(kMasterPrefix, 0) == 0) names.push_back(name);
    }
    return names;
  }
  static void ExpectSameCurves(const JobSpec& a, const JobSpec& b) {
    const auto x = Metrics(a), y = Metrics(b);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i]["loss"], y[i]["loss"]) << "step " << i + 1;
      EXPECT_EQ(x[i]["grad_norm"], y[i]["grad_norm"]) << "step " << i + 1;
    }
  }
};

TEST_F(MixedPrecisionTest, SeparateMastersTrainBitForBitLikeSharedOnes) {
  JobSpec shared = Spec("shared");
  JobSpec separate = Spec("separate");
  ASSERT_TRUE(RunTraining(shared, {}, nullptr).ok());
  auto summary = RunTraining(separate, SeparateMasters(), nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(FinalWeights(shared), FinalWeights(separate));
  ExpectSameCurves(shared, separate);
  // The masters travel with the checkpoint when they are kept apart, and
  // are the model file itself otherwise (an f32 model).
  const std::string optimizer = "/optimizer.safetensors";
  EXPECT_FALSE(MasterNames(TrainerStateDir(CheckpointPath(separate.checkpoint.dir, 12)) + optimizer)
                   .empty());
  EXPECT_TRUE(
      MasterNames(TrainerStateDir(CheckpointPath(shared.checkpoint.dir, 12)) + optimizer).empty());
}

TEST_F(MixedPrecisionTest, SeparateMastersResumeBitForBit) {
  JobSpec straight = Spec("straight");
  ASSERT_TRUE(RunTraining(straight, SeparateMasters(), nullptr).ok());
  JobSpec interrupted = Spec("interrupted");
  TrainOptions stop = SeparateMasters();
  stop.stop_after_step = 7;
  ASSERT_TRUE(RunTraining(interrupted, stop, nullptr).ok());
  auto resumed = RunTraining(interrupted, SeparateMasters(), nullptr);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->first_step, 8);
  EXPECT_EQ(FinalStateFile(straight, "optimizer.safetensors"),
            FinalStateFile(interrupted, "optimizer.safetensors"));
  ExpectSameCurves(straight, interrupted);
}

// A bf16 model file cannot hold fp32 masters: checkpoints are written in the
// model's own dtype (so transformers loads them as published) and carry the
// masters beside it, and a resume continues from the masters, not from the
// rounded file.
TEST_F(MixedPrecisionTest, Bf16ModelFilesKeepTheirDtypeAndTheirMasters) {
  JobSpec straight = Spec("bf16-straight");
  straight.model = (root_ / "model-bf16").string();
  ASSERT_TRUE(RunTraining(straight, {}, nullptr).ok());
  const std::string last = CheckpointPath(straight.checkpoint.dir, 12);
  auto model = SafetensorsFile::Open(last + "/model.safetensors");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(*model->dtype("model.embed_tokens.weight"), SafetensorsDType::kBF16);
  EXPECT_FALSE(MasterNames(TrainerStateDir(last) + "/optimizer.safetensors").empty());

  JobSpec interrupted = Spec("bf16-interrupted");
  interrupted.model = straight.model;
  TrainOptions stop;
  stop.stop_after_step = 7;
  ASSERT_TRUE(RunTraining(interrupted, stop, nullptr).ok());
  ASSERT_TRUE(RunTraining(interrupted, {}, nullptr).ok());
  EXPECT_EQ(FinalStateFile(straight, "optimizer.safetensors"),
            FinalStateFile(interrupted, "optimizer.safetensors"));
  ExpectSameCurves(straight, interrupted);
}

// Under ZeRO-2 each rank keeps only its shard of the masters; with separate
// masters the ranks all-gather the compute copy after the cast. Two ranks
// with separate masters end bit-identical to two ranks with shared ones,
// and each rank's optimizer file holds exactly its 1/N shard.
TEST_F(MixedPrecisionTest, Zero2MasterShardsMatchSharedMasters) {
  auto run = [&](const std::string& name, bool separate) {
    JobSpec spec = Spec(name);
    spec.train.steps = 4;
    spec.resources.world_size = 2;
    const std::string rendezvous = (root_ / ("rendezvous-" + name)).string();
    fs::create_directories(rendezvous);
    const std::vector<int> codes = dist_testing::RunRankProcesses(2, [&](int rank) {
      TrainOptions options;
      options.separate_master = separate;
      options.connect = [&](Backend& backend) {
        return ConnectThroughDirectory(rendezvous, backend, {rank, 2});
      };
      auto summary = RunTraining(spec, options, nullptr);
      if (!summary.ok())
        std::fprintf(stderr, "rank %d: %s\n", rank, summary.status().ToString().c_str());
      return summary.ok() ? 0 : 1;
    });
    EXPECT_EQ(codes, std::vector<int>({0, 0}));
    return spec;
  };
  const JobSpec shared = run("zero2-shared", false);
  const JobSpec separate = run("zero2-separate", true);
  EXPECT_EQ(FinalWeights(shared), FinalWeights(separate));
  ExpectSameCurves(shared, separate);

  // Shard ownership: rank r's masters are elements [r S, (r+1) S) of each
  // group, and equal the final weights there (f32 compute: exact).
  CpuAllocator allocator;
  auto weights = ParameterStore::Load(CheckpointPath(separate.checkpoint.dir, 4), allocator,
                                      "final weights", 2);
  ASSERT_TRUE(weights.ok()) << weights.status();
  for (int rank = 0; rank < 2; ++rank) {
    auto file = SafetensorsFile::Open(TrainerStateDir(CheckpointPath(separate.checkpoint.dir, 4)) +
                                      "/" + OptimizerShardFileName(rank, 2));
    ASSERT_TRUE(file.ok()) << file.status();
    for (const ParameterGroup& group : weights->groups()) {
      const int64_t shard = group.flat.numel() / 2;
      auto master = file->ReadAsF32(kMasterPrefix + group.name, allocator);
      ASSERT_TRUE(master.ok()) << master.status();
      ASSERT_EQ(master->numel(), shard) << group.name;
      const float* expected = group.flat.data<float>() + rank * shard;
      const float* got = master->data<float>();
      for (int64_t i = 0; i < shard && rank * shard + i < group.numel; ++i) {
        ASSERT_EQ(got[i], expected[i]) << group.name << " rank " << rank << " element " << i;
      }
    }
  }
}

// ZeRO-2 on a world of one rank (what a single GPU runs over NCCL) reaches
// the plain run's weights: the same sums, grouped per pass.
TEST_F(MixedPrecisionTest, Zero2OnOneRankMatchesThePlainRun) {
  JobSpec plain = Spec("plain");
  plain.train.steps = 4;
  ASSERT_TRUE(RunTraining(plain, {}, nullptr).ok());
  JobSpec zero = Spec("zero-one-rank");
  zero.train.steps = 4;
  const std::string rendezvous = (root_ / "rendezvous-one").string();
  fs::create_directories(rendezvous);
  TrainOptions options;
  options.separate_master = true;
  options.connect = [&](Backend& backend) {
    return ConnectThroughDirectory(rendezvous, backend, {0, 1});
  };
  auto summary = RunTraining(zero, options, nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const auto a = Metrics(plain), b = Metrics(zero);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i]["loss"].get<double>(), b[i]["loss"].get<double>(), 1e-6) << "step " << i + 1;
  }
}

TEST_F(MixedPrecisionTest, TheJobsDeviceMustBeTheWorkers) {
  JobSpec spec = Spec("gpu-job");
  spec.resources.device = DeviceKind::kCuda;
  spec.train.precision = Precision::kBf16;
  auto refused = RunTraining(spec, {}, nullptr);  // this worker trains on the CPU
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("resources.device"), std::string::npos);

  JobSpec cpu = Spec("cpu-job");
  TrainOptions on_gpu;
  on_gpu.device = "cuda:0";
  auto mismatch = RunTraining(cpu, on_gpu, nullptr);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(cpu.checkpoint.dir + "/metrics.jsonl"));
}

}  // namespace
}  // namespace sbp
