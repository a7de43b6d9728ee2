// LoRA training end to end on a tiny model: the adapters learn while the base
// stays frozen, checkpoints are PEFT adapter directories, a resumed run ends
// bit-identical to an uninterrupted one, and separate fp32 masters change
// nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "kernels/random.h"
#include "nlohmann/json.hpp"
#include "tests/worker/train/trainer_fixture.h"
#include "worker/engine/lora_store.h"
#include "worker/model/safetensors.h"
#include "worker/train/peft_adapter.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

class LoraTrainingTest : public train_testing::TrainerFixture {
 protected:
  JobSpec LoraSpec(const std::string& name) {
    JobSpec spec = Spec(name);
    spec.lora.r = 4;
    spec.lora.alpha = 8;
    spec.lora.target_modules = LoraModuleNames();
    spec.lora.init_seed = 5;
    return spec;
  }
};

TEST_F(LoraTrainingTest, LearnsAndSavesAPeftAdapter) {
  JobSpec spec = LoraSpec("lora_learns");
  spec.train.steps = 40;
  spec.train.schedule = LrSchedule::kConstant;
  spec.train.warmup_steps = 0;
  auto summary = RunTraining(spec, {}, nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const auto metrics = Metrics(spec);
  ASSERT_EQ(metrics.size(), 40u);
  const double first = metrics.front()["loss"], last = metrics.back()["loss"];
  EXPECT_LE(last, 0.85 * first) << "loss " << first << " -> " << last;

  const std::string dir = CheckpointPath(spec.checkpoint.dir, spec.train.steps);
  EXPECT_TRUE(fs::exists(dir + "/adapter_model.safetensors"));
  EXPECT_TRUE(fs::exists(TrainerStateDir(dir) + "/trainer_state.json"));
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
  std::ifstream in(dir + "/adapter_config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["task_type"], "CAUSAL_LM");
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["lora_alpha"], 8.0);
  EXPECT_EQ(config["target_modules"], nlohmann::json(LoraModuleNames()));
  // What PEFT's AutoPeftModelForCausalLM loads the base model from.
  // An absolute path, so that it loads from any working directory.
  EXPECT_EQ(config["base_model_name_or_path"],
            fs::absolute(spec.model).lexically_normal().string());
  EXPECT_TRUE(fs::path(config["base_model_name_or_path"].get<std::string>()).is_absolute());
  EXPECT_TRUE(fs::exists(dir + "/generation_config.json"));
  auto options = ReadPeftAdapterConfig(dir);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->r, 4);

  auto file = SafetensorsFile::Open(dir + "/adapter_model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  auto model_config = PresetConfig("tiny-qwen3");
  EXPECT_EQ(file->names().size(), 14u * model_config->num_hidden_layers);
  // Both matrices moved away from their initialisation (B from zero).
  CpuAllocator allocator;
  auto b = file->ReadAsF32(PeftAdapterKey(1, "down_proj", false), allocator);
  ASSERT_TRUE(b.ok()) << b.status();
  double sum = 0;
  for (int64_t i = 0; i < b->numel(); ++i) sum += std::abs(b->data<float>()[i]);
  EXPECT_GT(sum, 0.0);
}

TEST_F(LoraTrainingTest, ResumeIsBitIdenticalToAnUninterruptedRun) {
  JobSpec straight = LoraSpec("lora_straight");
  ASSERT_TRUE(RunTraining(straight, {}, nullptr).ok());
  JobSpec interrupted = LoraSpec("lora_interrupted");
  TrainOptions stop;
  stop.stop_after_step = 7;
  auto first = RunTraining(interrupted, stop, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = RunTraining(interrupted, {}, nullptr);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->first_step, 8);
  EXPECT_EQ(FinalFile(straight, "adapter_model.safetensors"),
            FinalFile(interrupted, "adapter_model.safetensors"));
  const auto a = Metrics(straight), b = Metrics(interrupted);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;
}

TEST_F(LoraTrainingTest, SeparateMastersAreBitIdentical) {
  JobSpec shared = LoraSpec("lora_shared");
  shared.train.steps = 4;
  JobSpec separate = LoraSpec("lora_separate");
  separate.train.steps = 4;
  TrainOptions options;
  options.separate_master = true;
  ASSERT_TRUE(RunTraining(shared, {}, nullptr).ok());
  ASSERT_TRUE(RunTraining(separate, options, nullptr).ok());
  EXPECT_EQ(FinalFile(shared, "adapter_model.safetensors"),
            FinalFile(separate, "adapter_model.safetensors"));
}

TEST_F(LoraTrainingTest, NeedsLessMemoryThanFullFineTuning) {
  JobSpec full = Spec("full_memory");
  full.train.steps = 1;
  JobSpec lora = LoraSpec("lora_memory");
  lora.train.steps = 1;
  auto a = RunTraining(full, {}, nullptr);
  auto b = RunTraining(lora, {}, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  // Full fine-tuning adds gradients and two moments (3x the weights).
  auto config = PresetConfig("tiny-qwen3");
  const double weights = 4.0 * ParameterCount(*config);
  EXPECT_LT(b->peak_bytes, a->peak_bytes - 2.5 * weights);
}

// DPO's reference defaults to the model: with LoRA that is the frozen base
// itself (no second copy), which gives what a separately loaded copy gives.
TEST_F(LoraTrainingTest, DpoReferenceIsTheFrozenBase) {
  {
    std::ofstream pairs(root_ / "pairs.jsonl");
    for (int i = 0; i < 4; ++i) {
      std::vector<int32_t> prompt(5 + i), chosen(6), rejected(4 + i);
      for (auto* v : {&prompt, &chosen, &rejected}) {
        Tensor t = Tensor::Wrap(v->data(), {static_cast<int64_t>(v->size())}, DType::kI32);
        FillIntegers(t, 300 + 10 * i + static_cast<int>(v->size()), 0, 256);
      }
      pairs << nlohmann::json{{"prompt_ids", prompt},
                              {"chosen_ids", chosen},
                              {"rejected_ids", rejected}}
                   .dump()
            << "\n";
    }
  }
  fs::copy(root_ / "model", root_ / "model-copy", fs::copy_options::recursive);
  auto dpo = [&](const std::string& name, const std::string& reference) {
    JobSpec spec = LoraSpec(name);
    spec.objective = Objective::kDpo;
    spec.data = (root_ / "pairs.jsonl").string();
    spec.dpo.beta = 0.5;
    spec.dpo.reference = reference;
    spec.train.steps = 3;
    return spec;
  };
  const JobSpec shared = dpo("lora_dpo_base", (root_ / "model").string());
  const JobSpec copied = dpo("lora_dpo_copy", (root_ / "model-copy").string());
  auto a = RunTraining(shared, {}, nullptr);
  auto b = RunTraining(copied, {}, nullptr);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(FinalFile(shared, "adapter_model.safetensors"),
            FinalFile(copied, "adapter_model.safetensors"));
  const auto ma = Metrics(shared), mb = Metrics(copied);
  ASSERT_EQ(ma.size(), 3u);
  EXPECT_NEAR(ma[0]["loss"].get<double>(), std::log(2.0), 1e-6);  // B = 0: policy == reference
  for (size_t i = 0; i < ma.size(); ++i) EXPECT_EQ(ma[i]["loss"], mb[i]["loss"]);
  auto config = PresetConfig("tiny-qwen3");
  EXPECT_LE(a->peak_bytes, b->peak_bytes - 4 * ParameterCount(*config));  // no second copy
}

TEST_F(LoraTrainingTest, ResumingWithAnotherRankIsRefused) {
  JobSpec spec = LoraSpec("lora_rank_change");
  spec.train.steps = 2;
  ASSERT_TRUE(RunTraining(spec, {}, nullptr).ok());
  JobSpec other = LoraSpec("lora_rank_change_2");
  other.lora.r = 8;
  other.resume_from = CheckpointPath(spec.checkpoint.dir, 2);
  auto refused = RunTraining(other, {}, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("r = 4"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace sbp
