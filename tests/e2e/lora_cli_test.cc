// LoRA through the CLI as a user runs it: `sbp train` with a `lora:` block
// writes PEFT adapter checkpoints, and `sbp lora merge` folds one into the
// base model; the merged weights equal W + s B A computed here from the
// files alone. Bad input is exit code 2 with a message naming it.
#include <gtest/gtest.h>

#include <cmath>

#include "nlohmann/json.hpp"
#include "tests/e2e/cli_test_util.h"
#include "worker/model/safetensors.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;

class LoraCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir(std::string("lora_cli_") +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    const CommandResult init =
        RunCommand(SbpBinary() + " model init --preset tiny-qwen3 --seed 4 --out model", dir_);
    ASSERT_EQ(init.exit_code, 0) << init.err;
    WriteFile(dir_ / "data.jsonl",
              "{\"prompt_ids\": [1, 17, 18, 19, 2], \"completion_ids\": [19, 18, 17, 3]}\n"
              "{\"input_ids\": [1, 20, 21, 2, 21, 20, 3]}\n");
    WriteFile(dir_ / "job.yaml",
              "name: lora-job\nmodel: model\ndata: data.jsonl\nobjective: sft\nseq_len: 32\n"
              "streambp: {mode: stream, chunk_tokens: 3, logits_chunk_tokens: 2}\n"
              "train: {steps: 4, sequences_per_step: 2, lr: 5.0e-2}\n"
              "lora: {r: 2, alpha: 6, target_modules: [q_proj, v_proj, down_proj], "
              "init_seed: 1}\n"
              "checkpoint: {every_steps: 2, dir: run}\n");
  }

  fs::path dir_;
};

TEST_F(LoraCliTest, TrainsAndMerges) {
  const CommandResult train = RunCommand(SbpBinary() + " train job.yaml", dir_);
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const fs::path adapter = dir_ / "run/checkpoints/step-00000004";
  ASSERT_TRUE(fs::exists(adapter / "adapter_config.json"));
  ASSERT_TRUE(fs::exists(adapter / "adapter_model.safetensors"));

  const CommandResult merge = RunCommand(
      SbpBinary() +
          " lora merge --model model --adapter run/checkpoints/step-00000004 --out merged",
      dir_);
  ASSERT_EQ(merge.exit_code, 0) << merge.err;
  const nlohmann::json summary = nlohmann::json::parse(merge.out);
  EXPECT_EQ(summary["merged"], 6);
  EXPECT_DOUBLE_EQ(summary["scaling"].get<double>(), 3.0);

  // W' = W + 3 B A, element by element, from the three files.
  auto base = SafetensorsFile::Open((dir_ / "model/model.safetensors").string());
  auto lora = SafetensorsFile::Open((adapter / "adapter_model.safetensors").string());
  auto merged = SafetensorsFile::Open((dir_ / "merged/model.safetensors").string());
  ASSERT_TRUE(base.ok() && lora.ok() && merged.ok());
  CpuAllocator allocator;
  int checked = 0;
  for (const std::string& name : base->names()) {
    auto w = base->ReadAsF32(name, allocator);
    auto m = merged->ReadAsF32(name, allocator);
    ASSERT_TRUE(w.ok() && m.ok()) << name;
    const std::string key = "base_model.model." + name.substr(0, name.size() - 7);  // - ".weight"
    if (!lora->Contains(key + ".lora_A.weight")) {
      EXPECT_EQ(std::memcmp(w->raw_data(), m->raw_data(), w->nbytes()), 0) << name;
      continue;
    }
    auto a = lora->ReadAsF32(key + ".lora_A.weight", allocator);
    auto b = lora->ReadAsF32(key + ".lora_B.weight", allocator);
    ASSERT_TRUE(a.ok() && b.ok());
    const int64_t out = w->dim(0), in = w->dim(1), r = a->dim(0);
    double diff = 0, norm = 0, update = 0;
    for (int64_t i = 0; i < out; ++i) {
      for (int64_t j = 0; j < in; ++j) {
        double delta = 0;
        for (int64_t k = 0; k < r; ++k) {
          delta += double{b->data<float>()[i * r + k]} * a->data<float>()[k * in + j];
        }
        const double expected = w->data<float>()[i * in + j] + 3.0 * delta;
        diff += std::pow(m->data<float>()[i * in + j] - expected, 2);
        norm += expected * expected;
        update += std::abs(delta);
      }
    }
    EXPECT_LE(std::sqrt(diff / norm), 1e-6) << name;
    EXPECT_GT(update, 0.0) << name;  // B moved away from zero in training
    ++checked;
  }
  EXPECT_EQ(checked, 6);

  // Without --model the base model is the one the adapter's checkpoint names.
  const nlohmann::json config =
      nlohmann::json::parse(ReadAll((adapter / "adapter_config.json").string()));
  EXPECT_EQ(fs::path(config["base_model_name_or_path"].get<std::string>()).filename(), "model");
  const CommandResult named = RunCommand(
      SbpBinary() + " lora merge --adapter run/checkpoints/step-00000004 --out merged-named", dir_);
  ASSERT_EQ(named.exit_code, 0) << named.err;
  EXPECT_EQ(ReadAll((dir_ / "merged-named/model.safetensors").string()),
            ReadAll((dir_ / "merged/model.safetensors").string()));
  // An adapter that names no base model needs --model.
  fs::create_directories(dir_ / "nobase");
  fs::copy_file(adapter / "adapter_model.safetensors", dir_ / "nobase/adapter_model.safetensors");
  nlohmann::json unnamed = config;
  unnamed["base_model_name_or_path"] = nullptr;
  WriteFile(dir_ / "nobase/adapter_config.json", unnamed.dump());
  const CommandResult unnamed_merge =
      RunCommand(SbpBinary() + " lora merge --adapter nobase --out merged-unnamed", dir_);
  EXPECT_EQ(unnamed_merge.exit_code, 2) << unnamed_merge.err;
  EXPECT_NE(unnamed_merge.err.find("names no base model"), std::string::npos) << unnamed_merge.err;
}

TEST_F(LoraCliTest, BadInputIsExitCodeTwo) {
  WriteFile(dir_ / "bad.yaml",
            "name: j\nmodel: model\ndata: data.jsonl\nobjective: sft\nseq_len: 32\n"
            "lora: {r: 2, target_modules: [q_proj, qkv]}\n");
  const CommandResult bad_spec = RunCommand(SbpBinary() + " train bad.yaml", dir_);
  EXPECT_EQ(bad_spec.exit_code, 2);
  EXPECT_NE(bad_spec.err.find("lora.target_modules: unknown module qkv"), std::string::npos)
      << bad_spec.err;
  const CommandResult no_adapter =
      RunCommand(SbpBinary() + " lora merge --model model --adapter nowhere --out merged", dir_);
  EXPECT_EQ(no_adapter.exit_code, 2) << no_adapter.err;
  EXPECT_NE(no_adapter.err.find("nowhere/adapter_config.json"), std::string::npos)
      << no_adapter.err;
  const CommandResult usage = RunCommand(SbpBinary() + " lora merge --model model", dir_);
  EXPECT_EQ(usage.exit_code, 2);
}

}  // namespace
}  // namespace sbp::testing
