// A tiny Qwen3 model (as f32 and as bf16 files), four random sequences to
// memorise and a job spec over them: the training-loop tests' fixture, on
// any device.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/random.h"
#include "nlohmann/json.hpp"
#include "worker/model/file_util.h"
#include "worker/model/model_io.h"
#include "worker/train/checkpoint.h"
#include "worker/train/checkpoint_layout.h"
#include "worker/train/dataset.h"
#include "worker/train/job_spec.h"
#include "worker/train/token_shards.h"

namespace sbp::train_testing {

namespace fs = std::filesystem;

class TrainerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        fs::path(::testing::TempDir()) /
        ("trainer_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    auto config = PresetConfig("tiny-qwen3");
    ASSERT_TRUE(config.ok());
    CpuAllocator allocator;
    auto weights = InitModelWeights(*config, 11, allocator);
    ASSERT_TRUE(weights.ok());
    ASSERT_TRUE(SaveModelDirectory((root_ / "model").string(), *weights, DType::kF32).ok());
    // The same weights as a bf16 model file (torch_dtype bfloat16).
    weights->config.torch_dtype = "bfloat16";
    ASSERT_TRUE(SaveModelDirectory((root_ / "model-bf16").string(), *weights, DType::kBF16).ok());
    // Four fixed random sequences to memorise.
    std::ofstream data(root_ / "data.jsonl");
    for (int i = 0; i < 4; ++i) {
      std::vector<int32_t> ids(24);
      Tensor t = Tensor::Wrap(ids.data(), {24}, DType::kI32);
      FillIntegers(t, 100 + i, 0, 256);
      data << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
    }
  }

  JobSpec Spec(const std::string& name) {
    JobSpec spec;
    spec.name = name;
    spec.model = (root_ / "model").string();
    spec.data = (root_ / "data.jsonl").string();
    spec.objective = Objective::kSft;
    spec.seq_len = 64;
    spec.streambp = {BackwardMode::kStream, 8, 8};
    spec.train.steps = 12;
    spec.train.sequences_per_step = 4;
    spec.train.micro_batch_sequences = 2;
    spec.train.lr = 1e-2;
    spec.train.schedule = LrSchedule::kCosine;
    spec.train.warmup_steps = 2;
    spec.train.weight_decay = 0.01;
    spec.train.max_grad_norm = 1.0;
    spec.train.seed = 3;
    spec.checkpoint.dir = (root_ / "runs" / name).string();
    spec.checkpoint.every_steps = 5;
    return spec;
  }

  static std::vector<nlohmann::json> Metrics(const JobSpec& spec) {
    std::vector<nlohmann::json> lines;
    std::ifstream in(spec.checkpoint.dir + "/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
    return lines;
  }

  static std::string FinalWeights(const JobSpec& spec) {
    return FinalFile(spec, "model.safetensors");
  }
  // A file of the run's last checkpoint, as bytes.
  static std::string FinalFile(const JobSpec& spec, const std::string& name) {
    auto bytes =
        ReadFileToString(CheckpointPath(spec.checkpoint.dir, spec.train.steps) + "/" + name);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return bytes.ok() ? *bytes : "";
  }
  // A file of its trainer_state/ (optimizer.safetensors, ...), as bytes.
  static std::string FinalStateFile(const JobSpec& spec, const std::string& name) {
    return FinalFile(spec, std::string(kTrainerStateDir) + "/" + name);
  }

  // ten.jsonl and the same examples as ten.shard: ten prompt/completion
  // examples of 8 to 15 tokens (ids < 256), so that 4 per step walk into a
  // second, reshuffled epoch within a run.
  void WriteTenExamples() {
    std::ofstream data(root_ / "ten.jsonl");
    for (int i = 0; i < 10; ++i) {
      std::vector<int32_t> prompt, completion;
      for (int t = 0; t < 3 + i % 4; ++t) prompt.push_back((7 * i + 3 * t + 1) % 256);
      for (int t = 0; t < 5 + i % 3; ++t) completion.push_back((11 * i + 5 * t + 2) % 256);
      data << nlohmann::json{{"prompt_ids", prompt}, {"completion_ids", completion}}.dump() << "\n";
    }
    data.close();
    const DataOptions options{256, 0, Truncation::kReject};
    absl::StatusOr<Dataset> loaded =
        Dataset::Load(Objective::kSft, (root_ / "ten.jsonl").string(), options);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ASSERT_TRUE(WriteTokenShards((root_ / "ten.shard").string(), loaded->sft(), 256).ok());
  }

  fs::path root_;
};

}  // namespace sbp::train_testing
