// ZeRO-2 with the layer checkpoints off the device: two rank processes (Gloo
// over loopback) with the host or the disk tier end with the same weights,
// to the bit, as the same two ranks with the device tier.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "tests/worker/dist/example_jobs.h"
#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/train/test_util.h"
#include "worker/dist/connect.h"
#include "worker/model/file_util.h"
#include "worker/train/checkpoint.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using dist_testing::RunRankProcesses;

class Zero2CheckpointTiersTest : public ::testing::TestWithParam<CheckpointTier> {
 protected:
  void SetUp() override {
    root_ = train_testing::MakeTempDir("zero2_tiers");
    dist_testing::SaveTinyModel(root_ + "/model", 5);
  }

  JobSpec Spec(const std::string& run, CheckpointTier tier) {
    JobSpec spec = dist_testing::ExampleJobSpec("sft", root_ + "/model");
    spec.train.steps = 3;
    spec.train.sequences_per_step = 5;
    spec.train.micro_batch_sequences = 2;
    spec.train.warmup_steps = 0;
    spec.train.lr = 1e-3;
    spec.checkpoint.dir = root_ + "/runs/" + run;
    spec.checkpoint.every_steps = 0;
    spec.resources.world_size = 2;
    spec.streambp.offload.checkpoints = tier;
    return spec;
  }

  // Trains `spec` on two rank processes; the final weights' bytes.
  std::string Train(const JobSpec& spec) {
    const std::string rendezvous = absl::StrCat(spec.checkpoint.dir, "-rendezvous");
    fs::create_directories(rendezvous);
    const std::vector<int> codes = RunRankProcesses(2, [&](int rank) {
      TrainOptions options;
      options.connect = [&](Backend& backend) {
        return ConnectThroughDirectory(rendezvous, backend, {rank, 2});
      };
      auto summary = RunTraining(spec, options, nullptr);
      if (!summary.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, summary.status().ToString().c_str());
        return 1;
      }
      return 0;
    });
    for (int r = 0; r < 2; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
    auto bytes = ReadFileToString(CheckpointPath(spec.checkpoint.dir, spec.train.steps) +
                                  "/model.safetensors");
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return bytes.ok() ? *bytes : "";
  }

  std::string root_;
};

TEST_P(Zero2CheckpointTiersTest, SameWeightsAsTheDeviceTier) {
  const std::string device = Train(Spec("device", CheckpointTier::kDevice));
  const std::string offloaded = Train(Spec("offloaded", GetParam()));
  ASSERT_FALSE(device.empty());
  EXPECT_TRUE(offloaded == device) << "the weights differ";
}

INSTANTIATE_TEST_SUITE_P(Tiers, Zero2CheckpointTiersTest,
                         ::testing::Values(CheckpointTier::kHost, CheckpointTier::kDisk),
                         [](const auto& info) {
                           return std::string(CheckpointTierName(info.param));
                         });

}  // namespace
}  // namespace sbp
