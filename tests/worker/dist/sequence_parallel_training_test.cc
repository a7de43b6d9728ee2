// Sequence parallelism in whole runs equals one worker: N rank processes
// (Gloo over loopback) in groups of P that share each sequence, training 20
// steps, end at the weights one worker reaches over the same global batches,
// within the ZeRO-2 tolerance, for SFT, DPO and GRPO, full fine-tuning and
// LoRA, in every backward mode, with the disk tier and optimizer offload,
// with P = N and with N / P data-parallel groups. The step figures (loss,
// tokens) count each sequence once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/worker/dist/example_jobs.h"
#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/train/test_util.h"
#include "worker/dist/connect.h"
#include "worker/engine/lora_store.h"
#include "worker/model/model_io.h"
#include "worker/train/checkpoint.h"
#include "worker/train/job_spec.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using dist_testing::RunRankProcesses;

struct Case {
  std::string objective;  // "sft", "dpo", "grpo"
  int world_size;
  int sequence_parallel;
  bool lora = false;
  BackwardMode mode = BackwardMode::kStream;
  // The disk tier for layer inputs and the optimizer in host memory (the
  // sharded run only: the tiers are bit-identical to the device's).
  bool tiers = false;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat(c.objective, "_N", c.world_size, "_P", c.sequence_parallel,
                      c.lora ? "_lora_" : "_", BackwardModeName(c.mode), c.tiers ? "_tiers" : "");
}

// Relative distance (per tensor) of the final weights from one worker's:
// the tolerances of the ZeRO-2 tests (zero2_training_test.cc,
// zero2_lora_test.cc; LoRA's B starts at zero, so its relative noise is
// larger).
constexpr double kTolerance = 1e-6;
constexpr double kLoraTolerance = 1e-5;

class SequenceParallelTrainingTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    root_ = train_testing::MakeTempDir("sequence_parallel");
    dist_testing::SaveTinyModel(root_ + "/model", 5);
  }
  void TearDown() override { fs::remove_all(root_); }

  JobSpec Spec(const Case& c, int world_size, int sequence_parallel, const std::string& run) {
    JobSpec spec = dist_testing::ExampleJobSpec(c.objective, root_ + "/model");
    spec.train.steps = 20;
    spec.train.sequences_per_step = 4;
    spec.train.micro_batch_sequences = 2;
    spec.train.warmup_steps = 0;
    spec.train.lr = 1e-3;
    spec.train.weight_decay = 0.01;
    // See zero2_training_test.cc: an eps above the gradients' rounding noise
    // keeps Adam's updates proportional to the gradient. The ranks of a
    // group compute each gradient from row pieces and K/V reductions in
    // another order than one worker, so the noise is larger than ZeRO-2's
    // reordering alone, and 20 steps let it compound.
    spec.train.eps = 1e-5;
    spec.streambp.mode = c.mode;
    spec.streambp.chunk_tokens = 5;  // several chunk steps per rank
    spec.streambp.logits_chunk_tokens = 7;
    spec.checkpoint.dir = root_ + "/runs/" + run;
    spec.checkpoint.every_steps = 10;
    spec.resources.world_size = world_size;
    spec.resources.sequence_parallel = sequence_parallel;
    if (c.lora) {
      spec.lora.r = 4;
      spec.lora.alpha = 8;
      spec.lora.target_modules = LoraModuleNames();
      spec.lora.init_seed = 3;
    }
    if (c.objective == "sft") spec.eval = {spec.data, 10, 5};
    return spec;
  }

  // (loss, tokens) of every step, and the eval losses, from metrics.jsonl.
  static std::vector<std::pair<double, double>> Steps(const std::string& run,
                                                      std::vector<double>* eval) {
    std::vector<std::pair<double, double>> steps;
    std::ifstream in(run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      steps.emplace_back(j["loss"].get<double>(), j["tokens"].get<double>());
      if (eval != nullptr && j.contains("eval_loss")) eval->push_back(j["eval_loss"]);
    }
    return steps;
  }

  std::string root_;
};

TEST_P(SequenceParallelTrainingTest, GroupsReachTheWeightsOfOneWorker) {
  const Case c = GetParam();
  const JobSpec single = Spec(c, 1, 1, "single");
  auto reference = RunTraining(single, TrainOptions{}, nullptr);
  ASSERT_TRUE(reference.ok()) << reference.status();

  JobSpec sharded = Spec(c, c.world_size, c.sequence_parallel, "sharded");
  if (c.tiers) {
    sharded.streambp.offload.checkpoints = CheckpointTier::kDisk;
    sharded.train.optimizer_offload = true;
  }
  const std::string rendezvous = root_ + "/rendezvous";
  fs::create_directories(rendezvous);
  const std::vector<int> codes = RunRankProcesses(c.world_size, [&](int rank) {
    TrainOptions options;
    const CollectiveOptions world{rank, c.world_size};
    options.connect = [&](Backend& backend) {
      return ConnectThroughDirectory(rendezvous, backend, world);
    };
    options.connect_sequence_group = [&](Backend& backend, int group_size) {
      return ConnectSequenceGroupThroughDirectory(rendezvous, backend, world, group_size);
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
  auto load = [&](const std::string& checkpoint, bool adapters) {
    return dist_testing::LoadCheckpointTensors(checkpoint, adapters, allocator);
  };
  const NamedTensors expected = load(CheckpointPath(single.checkpoint.dir, 20), c.lora);
  const NamedTensors actual = load(CheckpointPath(sharded.checkpoint.dir, 20), c.lora);
  dist_testing::ExpectTensorsClose(expected, actual, c.lora ? kLoraTolerance : kTolerance);
  // Training moved the weights (the comparison is not vacuous): the full
  // weights away from the initial model, LoRA's B away from zero.
  const NamedTensors initial = load(root_ + "/model", false);
  double moved = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const float* b = expected[i].second.data<float>();
    const float* a = c.lora ? nullptr : initial[i].second.data<float>();
    if (c.lora && expected[i].first.find("lora_B") == std::string::npos) continue;
    for (int64_t j = 0; j < expected[i].second.numel(); ++j) {
      moved += std::fabs(b[j] - (a != nullptr ? a[j] : 0.0f));
    }
  }
  EXPECT_GT(moved, 1e-3);

  // Each sequence counts once in the step figures, whatever P.
  std::vector<double> eval_one, eval_many;
  const auto one = Steps(single.checkpoint.dir, &eval_one);
  const auto many = Steps(sharded.checkpoint.dir, &eval_many);
  ASSERT_EQ(one.size(), 20u);
  ASSERT_EQ(many.size(), 20u);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(many[i].first, one[i].first, std::max(1e-4 * std::fabs(one[i].first), 1e-7))
        << "step " << i + 1;
    EXPECT_EQ(many[i].second, one[i].second) << "step " << i + 1;
  }
  ASSERT_EQ(eval_one.size(), eval_many.size());
  for (size_t i = 0; i < eval_one.size(); ++i) {
    EXPECT_NEAR(eval_many[i], eval_one[i], 1e-5 * eval_one[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Objectives, SequenceParallelTrainingTest,
                         ::testing::Values(Case{"sft", 2, 1}, Case{"sft", 2, 2}, Case{"sft", 4, 4},
                                           Case{"sft", 4, 2},
                                           Case{"sft", 2, 2, false, BackwardMode::kCheckpoint},
                                           Case{"sft", 4, 4, false, BackwardMode::kFull},
                                           Case{"dpo", 2, 2}, Case{"dpo", 4, 2}, Case{"grpo", 2, 2},
                                           Case{"grpo", 4, 4}, Case{"sft", 2, 2, true},
                                           Case{"dpo", 4, 4, true},
                                           Case{"sft", 4, 2, false, BackwardMode::kStream, true}),
                         CaseName);

}  // namespace
}  // namespace sbp
