// The committed example jobs and data (examples/jobs, examples/data) parse,
// load with the tiny presets' vocabulary, and stay commit-sized.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/worker/train/test_util.h"
#include "worker/engine/planner.h"
#include "worker/model/model_config.h"
#include "worker/train/dataset.h"
#include "worker/train/job_plan.h"
#include "worker/train/job_spec.h"

namespace sbp {
namespace {

constexpr int64_t kTinyVocab = 256;

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

class ExampleJobTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ExampleJobTest, ParsesAndLoads) {
  const std::string root = train_testing::SourceDir();
  const std::string path = absl::StrCat(root, "/examples/jobs/", GetParam(), ".yaml");
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  absl::StatusOr<JobSpec> spec = ParseJobSpec(ReadText(path), path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, GetParam());
  EXPECT_EQ(spec->model, "examples/models/tiny-qwen3");
  EXPECT_EQ(spec->seq_len, 64);
  EXPECT_EQ(spec->streambp.mode, BackwardMode::kStream);
  EXPECT_EQ(spec->resources.world_size, 1);
  EXPECT_EQ(spec->resources.device, DeviceKind::kCpu);
  EXPECT_TRUE(spec->checkpoint.dir.empty()) << "one run directory per job (runs/<job id>)";
  EXPECT_EQ(ObjectiveName(spec->objective), std::string(GetParam()).substr(5));

  absl::StatusOr<Dataset> data = Dataset::LoadForJob(*spec, root, kTinyVocab);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->objective(), spec->objective);
  EXPECT_GE(data->size(), spec->train.sequences_per_step);
  const std::string data_path = ResolveJobPath(root, spec->data);
  EXPECT_LT(std::filesystem::file_size(data_path), 200u * 1024) << data_path;
}

INSTANTIATE_TEST_SUITE_P(Examples, ExampleJobTest,
                         ::testing::Values("tiny-sft", "tiny-dpo", "tiny-grpo"));

// The LoRA example: SFT on the reverse task with adapters on every module;
// its plan is a fraction of full fine-tuning's model state.
TEST(ExampleLoraJobTest, ParsesLoadsAndPlansAsLora) {
  const std::string root = train_testing::SourceDir();
  const std::string path = absl::StrCat(root, "/examples/jobs/tiny-lora.yaml");
  absl::StatusOr<JobSpec> spec = ParseJobSpec(ReadText(path), path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "tiny-lora");
  EXPECT_EQ(spec->objective, Objective::kSft);
  EXPECT_EQ(spec->lora.r, 8);
  EXPECT_DOUBLE_EQ(spec->lora.scaling(), 2.0);
  EXPECT_EQ(spec->lora.target_modules, LoraModuleNames());
  EXPECT_TRUE(spec->checkpoint.dir.empty());
  absl::StatusOr<Dataset> data = Dataset::LoadForJob(*spec, root, kTinyVocab);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_GE(data->size(), spec->train.sequences_per_step);
  absl::StatusOr<ModelConfig> config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  PlanRequest request = PlanRequestForSpec(*spec, *config);
  EXPECT_EQ(request.lora, spec->lora);
  absl::StatusOr<MemoryPlan> lora = PlanMemory(request);
  ASSERT_TRUE(lora.ok()) << lora.status();
  request.lora = LoraOptions();
  absl::StatusOr<MemoryPlan> full = PlanMemory(request);
  ASSERT_TRUE(full.ok());
  EXPECT_LT(lora->model_state_bytes, full->model_state_bytes / 2);
}

// The chat example: text tokenized by `sbp data prepare` into a token shard
// file that fits the model of examples/configs/tiny-chat-qwen3.json.
TEST(ExampleChatJobTest, ReadsThePreparedShards) {
  const std::string root = train_testing::SourceDir();
  const std::string path = absl::StrCat(root, "/examples/jobs/tiny-chat.yaml");
  absl::StatusOr<JobSpec> spec = ParseJobSpec(ReadText(path), path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model, "examples/models/tiny-chat");
  absl::StatusOr<ModelConfig> config =
      LoadModelConfig(absl::StrCat(root, "/examples/configs/tiny-chat-qwen3.json"));
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<Dataset> data = Dataset::LoadForJob(*spec, root, config->vocab_size);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_TRUE(data->is_shards());
  EXPECT_GE(data->size(), spec->train.sequences_per_step);
  for (const char* file : {"tiny-chat.jsonl", "tiny-chat.tokens.jsonl", "tiny-chat.shard"}) {
    const std::string data_path = absl::StrCat(root, "/examples/data/", file);
    EXPECT_LT(std::filesystem::file_size(data_path), 200u * 1024) << data_path;
  }
}

// The GPU example (its model and data are generated, not committed): a
// bf16 stream-mode job on one CUDA worker that the planner fits, with its
// automatic chunk sizes, on an 80 GB card.
TEST(ExampleGpuJobTest, IsABf16StreamJobThatFitsOneGpu) {
  const std::string path =
      absl::StrCat(train_testing::SourceDir(), "/examples/jobs/gpu-sft-32k.yaml");
  absl::StatusOr<JobSpec> spec = ParseJobSpec(ReadText(path), path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->resources.device, DeviceKind::kCuda);
  EXPECT_EQ(spec->train.precision, Precision::kBf16);
  EXPECT_EQ(spec->seq_len, 32768);
  EXPECT_EQ(spec->streambp.mode, BackwardMode::kStream);
  absl::StatusOr<ModelConfig> config = PresetConfig("qwen3-0.6b");
  ASSERT_TRUE(config.ok());
  const int64_t gpu = int64_t{80} << 30;
  absl::StatusOr<MemoryPlan> plan = PlanAutoChunks(PlanRequestForSpec(*spec, *config), gpu,
                                                   DefaultSafetyMargin(DeviceKind::kCuda));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_LT(plan->peak_bytes, gpu);
  EXPECT_GT(plan->Term("master_weights"), 0);  // bf16 compute, fp32 masters
  // The trainer's gradients are f32 whatever the compute precision: 4 bytes
  // a parameter, as many bytes as the fp32 masters.
  EXPECT_EQ(plan->Term("gradients"), plan->Term("master_weights"));
}

TEST(ExampleDataTest, SftIsTheReverseTask) {
  absl::StatusOr<std::vector<TokenSequence>> sft =
      LoadSftJsonl(absl::StrCat(train_testing::SourceDir(), "/examples/data/tiny-sft.jsonl"),
                   DataOptions{kTinyVocab, 64, Truncation::kReject});
  ASSERT_TRUE(sft.ok()) << sft.status();
  for (const TokenSequence& s : *sft) {
    const size_t n = s.input_ids.size();
    ASSERT_GE(n, 11u);  // prompts of 4..8 symbols
    ASSERT_LE(n, 19u);
    const size_t len = (n - 3) / 2;              // BOS x SEP reverse(x) EOS
    ASSERT_EQ(s.labels[len + 1], kIgnoreIndex);  // SEP is part of the prompt
    for (size_t i = 0; i < len; ++i) {
      ASSERT_EQ(s.input_ids[1 + i], s.input_ids[n - 2 - i]);
      ASSERT_EQ(s.labels[n - 2 - i], s.input_ids[n - 2 - i]);
    }
  }
}

}  // namespace
}  // namespace sbp
