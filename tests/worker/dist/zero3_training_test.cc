// ZeRO-3 (train.zero_stage: 3) gives ZeRO-2's bits: N rank processes (Gloo
// over loopback) with the compute weights sharded and gathered group by
// group end with the same weights, optimizer shards and step losses, byte
// for byte, as the same run under ZeRO-2, for SFT and DPO, tied and
// untied heads, every backward mode, sequence parallelism, the disk tier
// with optimizer offload, and a run stopped and resumed from its ZeRO-3
// checkpoint; the validation set (5 examples) splits unevenly, and a rank
// one short runs an empty pass. (The model here has two layers, so the two
// gathered layers outweigh the shards' saving: zero_memory_test.cc checks
// the memory on a deeper one.)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "tests/worker/dist/example_jobs.h"
#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/train/test_util.h"
#include "worker/dist/connect.h"
#include "worker/model/model_io.h"
#include "worker/train/checkpoint.h"
#include "worker/train/checkpoint_layout.h"
#include "worker/train/job_spec.h"
#include "worker/train/sharded_checkpoint.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using dist_testing::RunRankProcesses;

struct Case {
  std::string objective;  // "sft", "dpo" (ZeRO-3 refuses grpo)
  int world_size;
  int sequence_parallel = 1;
  std::string preset = "tiny-qwen3";  // tiny-llama: tied embeddings
  BackwardMode mode = BackwardMode::kStream;
  bool tiers = false;  // disk tier and optimizer offload, in both runs
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string preset = c.preset.substr(5);  // "qwen3", "llama"
  return absl::StrCat(c.objective, "_N", c.world_size, "_P", c.sequence_parallel, "_", preset, "_",
                      BackwardModeName(c.mode), c.tiers ? "_tiers" : "");
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class Zero3TrainingTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { root_ = train_testing::MakeTempDir("zero3"); }
  void TearDown() override { fs::remove_all(root_); }

  void SaveModel(const std::string& preset) {
    auto config = PresetConfig(preset);
    ASSERT_TRUE(config.ok());
    CpuAllocator allocator;
    auto weights = InitModelWeights(*config, 7, allocator);
    ASSERT_TRUE(weights.ok());
    ASSERT_TRUE(SaveModelDirectory(root_ + "/model", *weights, DType::kF32).ok());
  }

  JobSpec Spec(const Case& c, int zero_stage, const std::string& run) {
    JobSpec spec = dist_testing::ExampleJobSpec(c.objective, root_ + "/model");
    spec.train.steps = 4;
    // ZeRO-3 needs the same examples per data-parallel group: 2 each.
    spec.train.sequences_per_step = 2 * c.world_size / c.sequence_parallel;
    spec.train.micro_batch_sequences = 2;
    spec.train.warmup_steps = 0;
    spec.train.lr = 1e-3;
    spec.train.weight_decay = 0.01;
    spec.train.zero_stage = zero_stage;
    spec.streambp.mode = c.mode;
    spec.streambp.chunk_tokens = 5;
    spec.streambp.logits_chunk_tokens = 7;
    if (c.tiers) {
      spec.streambp.offload.checkpoints = CheckpointTier::kDisk;
      spec.train.optimizer_offload = true;
    }
    spec.checkpoint.dir = root_ + "/runs/" + run;
    spec.checkpoint.every_steps = 2;
    spec.resources.world_size = c.world_size;
    spec.resources.sequence_parallel = c.sequence_parallel;
    if (c.objective == "sft") spec.eval = {spec.data, 2, 5};
    return spec;
  }

  // Runs `spec` on its ranks.
  void Run(const JobSpec& spec, const std::string& run, int64_t stop_after_step = 0) {
    const int n = static_cast<int>(spec.resources.world_size);
    const std::string rendezvous = absl::StrCat(root_, "/rendezvous-", run, stop_after_step);
    fs::create_directories(rendezvous);
    const std::vector<int> codes = RunRankProcesses(n, [&](int rank) {
      TrainOptions options;
      options.stop_after_step = stop_after_step;
      const CollectiveOptions world{rank, n};
      options.connect = [&](Backend& backend) {
        return ConnectThroughDirectory(rendezvous, backend, world);
      };
      options.connect_sequence_group = [&](Backend& backend, int group_size) {
        return ConnectSequenceGroupThroughDirectory(rendezvous, backend, world, group_size);
      };
      auto summary = RunTraining(spec, options, nullptr);
      if (!summary.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, summary.status().ToString().c_str());
        return 1;
      }
      return 0;
    });
    for (int r = 0; r < n; ++r) ASSERT_EQ(codes[r], 0) << run << " rank " << r;
  }

  // The checkpoint of `step` holds the same bytes in both runs: weights,
  // every rank's optimizer shard, the trainer state.
  void ExpectSameCheckpoint(const JobSpec& a, const JobSpec& b, int64_t step) {
    const std::string x = CheckpointPath(a.checkpoint.dir, step);
    const std::string y = CheckpointPath(b.checkpoint.dir, step);
    std::vector<std::string> files = {"model.safetensors"};
    for (int r = 0; r < a.resources.world_size; ++r) {
      files.push_back(std::string(kTrainerStateDir) + "/" +
                      OptimizerShardFileName(r, static_cast<int>(a.resources.world_size)));
    }
    for (const std::string& file : files) {
      const std::string left = ReadFile(x + "/" + file), right = ReadFile(y + "/" + file);
      ASSERT_FALSE(left.empty()) << x << "/" << file;
      EXPECT_TRUE(left == right) << file << " differs at step " << step;
    }
  }

  std::string root_;
};

TEST_P(Zero3TrainingTest, ShardedWeightsGiveZero2sBits) {
  const Case c = GetParam();
  SaveModel(c.preset);
  const JobSpec zero2 = Spec(c, 2, "zero2");
  const JobSpec zero3 = Spec(c, 3, "zero3");
  Run(zero2, "zero2");
  Run(zero3, "zero3");
  ExpectSameCheckpoint(zero2, zero3, 2);
  ExpectSameCheckpoint(zero2, zero3, 4);
  // The step figures (loss, gradient norm, eval loss) are the same numbers.
  auto metrics = [](const JobSpec& spec) {
    std::vector<std::string> fields;
    std::ifstream in(spec.checkpoint.dir + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      fields.push_back(absl::StrCat(j["loss"].dump(), " ", j["grad_norm"].dump(), " ",
                                    j.value("eval_loss", 0.0)));
    }
    return fields;
  };
  const std::vector<std::string> two = metrics(zero2), three = metrics(zero3);
  ASSERT_EQ(two.size(), 4u);
  EXPECT_EQ(two, three);
  // Training moved the weights (the comparison is not vacuous).
  EXPECT_NE(ReadFile(root_ + "/model/model.safetensors"),
            ReadFile(CheckpointPath(zero3.checkpoint.dir, 4) + "/model.safetensors"));
}

INSTANTIATE_TEST_SUITE_P(
    Runs, Zero3TrainingTest,
    ::testing::Values(Case{"sft", 2}, Case{"sft", 3, 1, "tiny-llama"}, Case{"dpo", 2},
                      Case{"dpo", 3, 1, "tiny-llama"}, Case{"sft", 4, 2},
                      Case{"dpo", 2, 2, "tiny-llama"},
                      Case{"sft", 2, 1, "tiny-qwen3", BackwardMode::kFull},
                      Case{"sft", 2, 1, "tiny-qwen3", BackwardMode::kCheckpoint},
                      Case{"sft", 2, 2, "tiny-qwen3", BackwardMode::kStream, true}),
    CaseName);

// A ZeRO-3 run stopped after step 2 and resumed from its checkpoint ends
// where the uninterrupted run does; so does a ZeRO-2 run resumed from a
// ZeRO-3 checkpoint (the format is the same).
TEST_F(Zero3TrainingTest, ResumesFromItsCheckpointBitForBit) {
  const Case c{"sft", 2};
  SaveModel(c.preset);
  const JobSpec whole = Spec(c, 3, "whole");
  Run(whole, "whole");
  const JobSpec resumed = Spec(c, 3, "resumed");
  Run(resumed, "resumed", /*stop_after_step=*/2);
  ASSERT_FALSE(fs::exists(CheckpointPath(resumed.checkpoint.dir, 4)));
  Run(resumed, "resumed");
  ExpectSameCheckpoint(whole, resumed, 4);

  JobSpec crossed = Spec(c, 3, "crossed");
  Run(crossed, "crossed", /*stop_after_step=*/2);
  crossed.train.zero_stage = 2;
  Run(crossed, "crossed");
  ExpectSameCheckpoint(whole, crossed, 4);
}

}  // namespace
}  // namespace sbp
