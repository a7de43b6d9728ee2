// ZeRO-2 equals one worker: N rank processes (Gloo over loopback) training k
// steps end with the weights one worker reaches with gradient accumulation
// over the same global batches, for SFT, DPO and GRPO, with steps whose
// examples (of unequal lengths) do not split evenly over the ranks. Each
// rank's allocator peak shows the sharded gradients and optimizer state.
#include <gtest/gtest.h>

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
#include "worker/engine/parameter_store.h"
#include "worker/model/model_io.h"
#include "worker/model/safetensors.h"
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
};

class Zero2TrainingTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    root_ = train_testing::MakeTempDir("zero2");
    dist_testing::SaveTinyModel(root_ + "/model", 5);
  }

  JobSpec Spec(const std::string& objective, int world_size, const std::string& run) {
    JobSpec spec = dist_testing::ExampleJobSpec(objective, root_ + "/model");
    spec.train.steps = 3;
    spec.train.sequences_per_step = 5;  // 5 examples over 2, 3 or 4 ranks: uneven
    spec.train.micro_batch_sequences = 2;
    spec.train.warmup_steps = 0;
    spec.train.lr = 1e-3;
    spec.train.weight_decay = 0.01;
    // Adam's first steps move each weight by about lr * sign(gradient), so an
    // element whose gradient is at the level of fp32 rounding noise (the ranks
    // sum in a different order) would move by +-lr at random; an eps above
    // that noise keeps such elements' updates proportional to the gradient.
    spec.train.eps = 1e-6;
    spec.checkpoint.dir = root_ + "/runs/" + run;
    spec.checkpoint.every_steps = 2;
    spec.resources.world_size = world_size;
    // SFT also computes a validation loss, split over the ranks (7 examples:
    // uneven over 2, 3 and 4 ranks).
    if (objective == "sft") spec.eval = {spec.data, 2, 7};
    return spec;
  }

  static NamedTensors Load(const std::string& checkpoint, CpuAllocator& allocator) {
    return dist_testing::LoadCheckpointTensors(checkpoint, false, allocator);
  }

  std::string root_;
};

TEST_P(Zero2TrainingTest, RanksReachTheWeightsOfOneWorker) {
  const Case c = GetParam();
  // One worker, gradient accumulation over the whole global batch.
  const JobSpec single = Spec(c.objective, 1, "single");
  auto reference = RunTraining(single, TrainOptions{}, nullptr);
  ASSERT_TRUE(reference.ok()) << reference.status();

  // N ranks as processes; each writes its allocator peak to a file.
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
    std::ofstream(absl::StrCat(root_, "/peak-", rank)) << summary->peak_bytes;
    return 0;
  });
  for (int r = 0; r < c.world_size; ++r) ASSERT_EQ(codes[r], 0) << "rank " << r;

  CpuAllocator allocator;
  const NamedTensors expected = Load(CheckpointPath(single.checkpoint.dir, 3), allocator);
  const NamedTensors actual = Load(CheckpointPath(sharded.checkpoint.dir, 3), allocator);
  dist_testing::ExpectTensorsClose(expected, actual, 1e-6);
  // The validation losses (steps 2 and 3) agree with one worker's.
  auto eval_losses = [](const std::string& run) {
    std::vector<double> losses;
    std::ifstream in(run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.contains("eval_loss")) losses.push_back(j["eval_loss"]);
    }
    return losses;
  };
  if (c.objective == "sft") {
    const std::vector<double> one = eval_losses(single.checkpoint.dir);
    const std::vector<double> many = eval_losses(sharded.checkpoint.dir);
    ASSERT_EQ(one.size(), 2u);
    ASSERT_EQ(many.size(), 2u);
    for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(many[i], one[i], 1e-5 * one[i]);
  }
  // The initial weights really changed (the comparison is not vacuous).
  const NamedTensors initial = Load(root_ + "/model", allocator);
  double moved = 0;
  for (size_t i = 0; i < initial.size(); ++i) {
    const float* a = initial[i].second.data<float>();
    const float* b = expected[i].second.data<float>();
    for (int64_t j = 0; j < initial[i].second.numel(); ++j) moved += std::fabs(a[j] - b[j]);
  }
  EXPECT_GT(moved, 1e-3);

  // Memory: each rank holds 1/N of the gradients and AdamW moments (three
  // parameter-sized stores on one worker) plus the gradient cache.
  auto config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  CpuAllocator layout_allocator;
  auto layout = ParameterStore::Create(*config, layout_allocator, "layout", c.world_size);
  ASSERT_TRUE(layout.ok());
  const auto& groups = layout->groups();
  const double full = static_cast<double>(layout->total_bytes());
  double largest_layer = 0;
  for (int l = 0; l < config->num_hidden_layers; ++l) {
    largest_layer = std::max<double>(largest_layer, groups[layout->layer_group(l)].flat.nbytes());
  }
  const double largest_group = std::max<double>(
      {largest_layer, static_cast<double>(groups[layout->embed_group()].flat.nbytes()),
       static_cast<double>(groups[layout->final_group()].flat.nbytes())});
  // Two layer buffers, the embedding's and the final group's, and the
  // reduce-scatter's receive buffer (one chunk of the largest group).
  const double cache = 2 * largest_layer + groups[layout->embed_group()].flat.nbytes() +
                       groups[layout->final_group()].flat.nbytes() + largest_group / c.world_size;
  const double saved = 3 * full * (1.0 - 1.0 / c.world_size);
  for (int r = 0; r < c.world_size; ++r) {
    std::ifstream in(absl::StrCat(root_, "/peak-", r));
    double peak = 0;
    in >> peak;
    EXPECT_LE(peak, reference->peak_bytes - saved + cache) << "rank " << r;
    EXPECT_LT(peak, reference->peak_bytes) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Objectives, Zero2TrainingTest,
                         ::testing::Values(Case{"sft", 2}, Case{"sft", 3}, Case{"sft", 4},
                                           Case{"dpo", 2}, Case{"dpo", 3}, Case{"grpo", 2},
                                           Case{"grpo", 4}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat(info.param.objective, "_", info.param.world_size,
                                               "_ranks");
                         });

}  // namespace
}  // namespace sbp
