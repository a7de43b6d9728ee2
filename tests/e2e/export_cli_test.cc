// Checkpoints as a user hands them on, through the real binary: `sbp export`
// writes a clean model (weights, config, generation config, tokenizer;
// a LoRA run merged into its base), refuses an --out that holds anything,
// and every command that takes a checkpoint also takes a run directory and
// checkpoints/latest, the link and an older run's text file alike.
#include <gtest/gtest.h>

#include <set>

#include "nlohmann/json.hpp"
#include "tests/e2e/cli_test_util.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;

class ExportCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir(std::string("export_cli_") +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(Sbp("model init --preset tiny-qwen3 --seed 4 --out model").exit_code, 0);
    // A base model with a tokenizer: checkpoints and exports carry it.
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
      fs::copy_file(fs::path(SourceDir()) / "tests/tokenizer/tiny-bpe" / name,
                    dir_ / "model" / name);
    }
    WriteFile(dir_ / "data.jsonl",
              "{\"prompt_ids\": [1, 17, 18, 19, 2], \"completion_ids\": [19, 18, 17, 3]}\n"
              "{\"input_ids\": [1, 20, 21, 2, 21, 20, 3]}\n");
    WriteFile(dir_ / "prompts.jsonl", "{\"prompt_ids\": [1, 17, 18]}\n");
  }

  CommandResult Sbp(const std::string& args) { return RunCommand(SbpBinary() + " " + args, dir_); }

  // Trains `name` (4 steps, checkpoints at 2 and 4) into the run directory `name`.
  void Train(const std::string& name, const std::string& extra = "") {
    WriteFile(dir_ / (name + ".yaml"),
              "name: " + name +
                  "\nmodel: model\ndata: data.jsonl\nobjective: sft\nseq_len: 32\n"
                  "streambp: {mode: stream, chunk_tokens: 3, logits_chunk_tokens: 2}\n"
                  "train: {steps: 4, sequences_per_step: 2, lr: 5.0e-2}\n"
                  "checkpoint: {every_steps: 2, dir: " +
                  name + "}\n" + extra);
    const CommandResult r = Sbp("train " + name + ".yaml");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  std::set<std::string> Files(const fs::path& dir) {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
      names.insert(entry.path().filename().string());
    }
    return names;
  }

  std::string Bytes(const fs::path& path) { return ReadAll((dir_ / path).string()); }

  fs::path dir_;
};

const std::set<std::string> kModelFiles = {"config.json", "generation_config.json",
                                           "model.safetensors", "tokenizer.json",
                                           "tokenizer_config.json"};

TEST_F(ExportCliTest, AFullRunExportsItsNewestCheckpointAsIs) {
  Train("full");
  const CommandResult r = Sbp("export full --out exported");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json summary = nlohmann::json::parse(r.out);
  EXPECT_EQ(summary["checkpoint"], "full/checkpoints/step-00000004");
  EXPECT_EQ(summary["lora"], false);
  EXPECT_EQ(Files(dir_ / "exported"), kModelFiles);
  for (const std::string& name : kModelFiles) {
    EXPECT_EQ(Bytes("exported/" + name), Bytes("full/checkpoints/step-00000004/" + name)) << name;
  }
  EXPECT_EQ(Bytes("exported/tokenizer.json"), Bytes("model/tokenizer.json"));

  // --out must be new or empty; the refusal says what is there.
  const CommandResult again = Sbp("export full/checkpoints/latest --out exported");
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("--out: " + (dir_ / "exported").string() +
                           " is not empty (it holds config.json, generation_config.json, "
                           "model.safetensors, ...)"),
            std::string::npos)
      << again.err;
  WriteFile(dir_ / "a-file", "x");
  const CommandResult file = Sbp("export full --out a-file");
  EXPECT_EQ(file.exit_code, 2);
  EXPECT_NE(file.err.find("exists and is not a directory"), std::string::npos) << file.err;
  fs::create_directories(dir_ / "empty");
  ASSERT_EQ(Sbp("export full/checkpoints/latest --out empty").exit_code, 0);
  EXPECT_EQ(Files(dir_ / "empty"), kModelFiles);
  // Nothing left behind beside --out.
  for (const std::string& name : Files(dir_))
    EXPECT_EQ(name.find(".tmp-export"), std::string::npos);

  // An older run's `latest` is a text file naming the step.
  fs::remove(dir_ / "full/checkpoints/latest");
  WriteFile(dir_ / "full/checkpoints/latest", "step-00000002\n");
  const CommandResult old = Sbp("export full/checkpoints/latest --out old");
  ASSERT_EQ(old.exit_code, 0) << old.err;
  EXPECT_EQ(nlohmann::json::parse(old.out)["checkpoint"], "full/checkpoints/step-00000002");
}

TEST_F(ExportCliTest, ALoraRunExportsMergedIntoItsBase) {
  Train("adapted", "lora: {r: 2, alpha: 6, target_modules: [q_proj, v_proj], init_seed: 1}\n");
  const CommandResult r = Sbp("export adapted --out merged");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json summary = nlohmann::json::parse(r.out);
  EXPECT_EQ(summary["lora"], true);
  EXPECT_EQ(fs::path(summary["base"].get<std::string>()), fs::absolute(dir_ / "model"));
  EXPECT_EQ(Files(dir_ / "merged"), kModelFiles);
  // The same weights as `sbp lora merge`, which takes the run's `latest` too.
  const CommandResult merge = Sbp("lora merge --adapter adapted/checkpoints/latest --out m2");
  ASSERT_EQ(merge.exit_code, 0) << merge.err;
  EXPECT_EQ(Bytes("merged/model.safetensors"), Bytes("m2/model.safetensors"));
  EXPECT_NE(Bytes("merged/model.safetensors"), Bytes("model/model.safetensors"));
  ASSERT_EQ(Sbp("lora merge --adapter adapted --out m3").exit_code, 0);
  EXPECT_EQ(Bytes("m3/model.safetensors"), Bytes("m2/model.safetensors"));
}

TEST_F(ExportCliTest, GenerateAndGradTakeRunDirectoriesAndLatest) {
  Train("full");
  Train("adapted", "lora: {r: 2, alpha: 6, target_modules: [q_proj, v_proj], init_seed: 1}\n");
  const std::string flags = " --prompts prompts.jsonl --max-new-tokens 3 --temperature 0";
  auto generate = [&](const std::string& models) {
    const CommandResult r = Sbp("generate " + models + flags);
    EXPECT_EQ(r.exit_code, 0) << models << ": " << r.err;
    return r.out;
  };
  const std::string step = generate("--model full/checkpoints/step-00000004");
  EXPECT_NE(step.find("completion_ids"), std::string::npos) << step;
  EXPECT_EQ(generate("--model full/checkpoints/latest"), step);
  EXPECT_EQ(generate("--model full"), step);
  // A LoRA run as --model is its adapter on the base it names.
  const std::string adapter = generate("--model model --adapter adapted/checkpoints/step-00000004");
  EXPECT_EQ(generate("--model adapted"), adapter);
  EXPECT_EQ(generate("--model model --adapter adapted/checkpoints/latest"), adapter);
  EXPECT_NE(adapter, generate("--model model"));

  const CommandResult grad = Sbp("grad --model full --data data.jsonl --out g.safetensors");
  EXPECT_EQ(grad.exit_code, 0) << grad.err;

  fs::create_directories(dir_ / "fresh/checkpoints");
  const CommandResult none = Sbp("export fresh --out x");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("CHECKPOINT: fresh is a run directory with no checkpoint yet"),
            std::string::npos)
      << none.err;
  const CommandResult nowhere = Sbp("export nowhere --out x");
  EXPECT_EQ(nowhere.exit_code, 2);
  EXPECT_NE(nowhere.err.find("CHECKPOINT: nowhere does not exist"), std::string::npos)
      << nowhere.err;
  EXPECT_FALSE(fs::exists(dir_ / "x"));
}

}  // namespace
}  // namespace sbp::testing
