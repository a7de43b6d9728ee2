// ZeRO-2 with LoRA equals one worker: N rank processes (Gloo over loopback)
// reduce-scatter the adapters' gradients group by group and shard their
// AdamW state, and after k steps hold the adapters one worker reaches over
// the same global batches, for SFT and DPO, with uneven shares of examples.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "tests/worker/dist/example_jobs.h"
#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/train/test_util.h"
#include "worker/dist/connect.h"
#include "worker/engine/lora_store.h"
#include "worker/model/model_io.h"
#include "worker/model/safetensors.h"
#include "worker/train/checkpoint.h"
#include "worker/train/checkpoint_layout.h"
#include "worker/train/job_spec.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using dist_testing::RunRankProcesses;

struct Case {
  std::string objective;  // "sft", "dpo"
  int world_size;
};

class Zero2LoraTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    root_ = train_testing::MakeTempDir("zero2_lora");
    dist_testing::SaveTinyModel(root_ + "/model", 5);
  }

  JobSpec Spec(const std::string& objective, int world_size, const std::string& run) {
    JobSpec spec = dist_testing::ExampleJobSpec(objective, root_ + "/model");
    spec.train.steps = 3;
    spec.train.sequences_per_step = 5;  // 5 examples over 2 or 3 ranks: uneven
    spec.train.micro_batch_sequences = 2;
    spec.train.warmup_steps = 0;
    spec.train.lr = 1e-2;
    spec.train.weight_decay = 0.01;
    spec.train.eps = 1e-6;  // see zero2_training_test.cc
    spec.lora.r = 4;
    spec.lora.alpha = 8;
    spec.lora.target_modules = LoraModuleNames();
    spec.lora.init_seed = 3;
    spec.checkpoint.dir = root_ + "/runs/" + run;
    spec.checkpoint.every_steps = 2;
    spec.resources.world_size = world_size;
    return spec;
  }

  std::string root_;
};

TEST_P(Zero2LoraTest, RanksReachTheAdaptersOfOneWorker) {
  const Case c = GetParam();
  const JobSpec single = Spec(c.objective, 1, "single");
  auto reference = RunTraining(single, TrainOptions{}, nullptr);
  ASSERT_TRUE(reference.ok()) << reference.status();

  const JobSpec sharded = Spec(c.objective, c.world_size, "sharded");
  const std::string rendezvous = root_ + "/rendezvous";
  fs::create_directories(rendezvous);
  const std::vector<int> codes = RunRankProcesses(c.world_size, [&](int rank) {
    TrainOptions options;
    options.connect = [&](Backend& backend) {
      return ConnectThroughDirectory(rendezvous, backend, {rank, c.world_size});
    };
    auto summary = RunTraining(sharded, options, nullptr);
    if (!summary.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, summary.status().ToString().c_str());
      return 1;
    }
    return 0;
  });
  for (int r = 0; r < c.world_size; ++r) ASSERT_EQ(codes[r], 0) << "rank " << r;

  CpuAllocator allocator;
  const NamedTensors expected = dist_testing::LoadCheckpointTensors(
      CheckpointPath(single.checkpoint.dir, 3), true, allocator);
  const NamedTensors actual = dist_testing::LoadCheckpointTensors(
      CheckpointPath(sharded.checkpoint.dir, 3), true, allocator);
  dist_testing::ExpectTensorsClose(expected, actual, 1e-5);
  double moved_b = 0;
  for (const auto& [name, e] : expected) {
    if (name.find("lora_B") == std::string::npos) continue;
    for (int64_t j = 0; j < e.numel(); ++j) moved_b += std::fabs(e.data<float>()[j]);
  }
  EXPECT_GT(moved_b, 0.0);  // B left zero: the comparison is not vacuous
  // Each rank wrote its shard of the adapters' optimizer state.
  for (int r = 0; r < c.world_size; ++r) {
    char name[64];
    std::snprintf(name, sizeof(name), "/optimizer-rank-%05d-of-%05d.safetensors", r, c.world_size);
    EXPECT_TRUE(fs::exists(TrainerStateDir(CheckpointPath(sharded.checkpoint.dir, 3)) + name))
        << name;
  }
}

// A sharded LoRA run stopped after step 2 and resumed from its checkpoint
// (adapter file + each rank's optimizer shard) ends where an uninterrupted
// sharded run ends, bit for bit.
TEST_F(Zero2LoraTest, ResumesFromAShardedAdapterCheckpoint) {
  const int world = 2;
  auto run = [&](const JobSpec& spec, int64_t stop_after, const std::string& tag) {
    const std::string rendezvous = root_ + "/rendezvous-" + tag;
    fs::create_directories(rendezvous);
    const std::vector<int> codes = RunRankProcesses(world, [&](int rank) {
      TrainOptions options;
      options.stop_after_step = stop_after;
      options.connect = [&](Backend& backend) {
        return ConnectThroughDirectory(rendezvous, backend, {rank, world});
      };
      auto summary = RunTraining(spec, options, nullptr);
      if (!summary.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, summary.status().ToString().c_str());
        return 1;
      }
      return 0;
    });
    for (int r = 0; r < world; ++r) EXPECT_EQ(codes[r], 0) << tag << " rank " << r;
  };
  JobSpec straight = Spec("sft", world, "straight");
  straight.train.steps = 4;
  JobSpec resumed = Spec("sft", world, "resumed");
  resumed.train.steps = 4;
  run(straight, 0, "straight");
  run(resumed, 2, "first");
  run(resumed, 0, "second");
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string a =
      read(CheckpointPath(straight.checkpoint.dir, 4) + "/adapter_model.safetensors");
  const std::string b =
      read(CheckpointPath(resumed.checkpoint.dir, 4) + "/adapter_model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
}

INSTANTIATE_TEST_SUITE_P(Objectives, Zero2LoraTest,
                         ::testing::Values(Case{"sft", 2}, Case{"sft", 3}, Case{"dpo", 2}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat(info.param.objective, "_", info.param.world_size,
                                               "_ranks");
                         });

}  // namespace
}  // namespace sbp
