// Published long-context configs through the CLI: Llama 3.1 8B (llama3 RoPE
// scaling) and Qwen3-8B with YaRN (tests/reference/configs/, copied from the
// published config.json files). The published config plans as the preset
// does; a copy shrunk to a tiny size with the same RoPE fields initialises,
// trains, checkpoints and reloads with those fields intact.
#include <gtest/gtest.h>

#include "nlohmann/json.hpp"
#include "tests/e2e/cli_test_util.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct Published {
  std::string file;        // tests/reference/configs/<file>.json
  std::string preset;      // the same model as a preset
  std::string parameters;  // its parameter count
};

class PublishedRopeTest : public ::testing::TestWithParam<Published> {
 protected:
  void SetUp() override {
    std::string name = GetParam().file;
    for (char& c : name) c = c == '.' ? '_' : c;
    dir_ = FreshDir("published_rope_" + name);
    published_ =
        Json::parse(ReadAll(SourceDir() + "/tests/reference/configs/" + GetParam().file + ".json"));
  }

  CommandResult Sbp(const std::string& args) { return RunCommand(SbpBinary() + " " + args, dir_); }

  // The RoPE fields of a config.json, in the spelling of the published one.
  static Json RopeFields(const Json& config) {
    Json scaling = config.value("rope_scaling", Json());
    if (scaling.is_null() || scaling.empty()) scaling = config["rope_parameters"];
    Json fields;
    for (const char* key : {"rope_type", "factor", "low_freq_factor", "high_freq_factor",
                            "original_max_position_embeddings"}) {
      if (scaling.contains(key)) fields[key] = scaling[key];
    }
    fields["rope_theta"] =
        config.contains("rope_theta") ? config["rope_theta"] : scaling["rope_theta"];
    fields["rope_theta"] = fields["rope_theta"].get<double>();  // 1000000 == 1e6
    return fields;
  }

  fs::path dir_;
  Json published_;
};

TEST_P(PublishedRopeTest, PlansAsThePreset) {
  WriteFile(dir_ / "published/config.json", published_.dump(2));
  const CommandResult from_config = Sbp("plan --model published --seq-len 32768");
  ASSERT_EQ(from_config.exit_code, 0) << from_config.err;
  EXPECT_NE(from_config.out.find(GetParam().parameters + " parameters"), std::string::npos)
      << from_config.out;
  const CommandResult from_preset = Sbp("plan --preset " + GetParam().preset + " --seq-len 32768");
  ASSERT_EQ(from_preset.exit_code, 0) << from_preset.err;
  // The same plan, but for the first line's name.
  auto body = [](const std::string& text) { return text.substr(text.find('\n')); };
  EXPECT_EQ(body(from_config.out), body(from_preset.out));
}

TEST_P(PublishedRopeTest, ShrunkCopyTrainsAndRoundTripsItsRopeFields) {
  // Tiny sizes, every other field (RoPE scaling, theta, ids, dtype) as published.
  Json tiny = published_;
  tiny.update({{"vocab_size", 256},
               {"hidden_size", 64},
               {"intermediate_size", 128},
               {"num_hidden_layers", 2},
               {"num_attention_heads", 4},
               {"num_key_value_heads", 2}});
  if (tiny.contains("head_dim")) tiny["head_dim"] = 16;
  if (tiny.contains("max_window_layers")) tiny["max_window_layers"] = 2;
  WriteFile(dir_ / "tiny.json", tiny.dump(2));
  const Json want = RopeFields(published_);
  ASSERT_EQ(want["rope_type"], published_["rope_scaling"]["rope_type"]);

  const CommandResult init = Sbp("model init --config tiny.json --seed 5 --out model");
  ASSERT_EQ(init.exit_code, 0) << init.err;
  EXPECT_EQ(RopeFields(Json::parse(ReadAll((dir_ / "model/config.json").string()))), want);

  // Sequences past 64 positions, so that every RoPE pair turns.
  std::string long_ids;
  for (int i = 0; i < 90; ++i) long_ids += (i ? ", " : "") + std::to_string(3 + (i * 37) % 250);
  WriteFile(dir_ / "data.jsonl", "{\"input_ids\": [" + long_ids +
                                     "]}\n"
                                     "{\"prompt_ids\": [1, 17, 18, 19, 2], \"completion_ids\": "
                                     "[19, 18, 17, 3]}\n");
  WriteFile(dir_ / "job.yaml",
            "name: published-rope\nmodel: model\ndata: data.jsonl\nobjective: sft\nseq_len: 96\n"
            "streambp: {mode: stream, chunk_tokens: 16, logits_chunk_tokens: 32}\n"
            "train: {steps: 4, sequences_per_step: 2, lr: 1.0e-2}\n"
            "checkpoint: {every_steps: 2, dir: run}\n");
  const CommandResult train = Sbp("train job.yaml");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  EXPECT_NE(train.out.find("\"last_step\":4"), std::string::npos) << train.out;

  const fs::path checkpoint = dir_ / "run/checkpoints/step-00000004";
  ASSERT_TRUE(fs::exists(checkpoint / "config.json"));
  const Json saved = Json::parse(ReadAll((checkpoint / "config.json").string()));
  EXPECT_EQ(RopeFields(saved), want) << saved.dump(2);
  // Both spellings carry the scaling (transformers 4.x and 5.x readers).
  EXPECT_EQ(saved["rope_scaling"]["rope_type"], want["rope_type"]);
  EXPECT_EQ(saved["rope_parameters"]["rope_type"], want["rope_type"]);
  EXPECT_EQ(saved["rope_parameters"]["rope_theta"], want["rope_theta"]);

  // The checkpoint loads again: a gradient on it, and a plan from it.
  const CommandResult grad =
      Sbp("grad --model " + checkpoint.string() + " --data data.jsonl --out g.safetensors");
  ASSERT_EQ(grad.exit_code, 0) << grad.err;
  EXPECT_NE(grad.out.find("\"loss\""), std::string::npos) << grad.out;
  EXPECT_EQ(Sbp("plan --model " + checkpoint.string() + " --seq-len 1024").exit_code, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, PublishedRopeTest,
    ::testing::Values(Published{"llama-3.1-8b-instruct", "llama3.1-8b", "8030261248"},
                      Published{"qwen3-8b-yarn", "qwen3-8b", "8190735360"}),
    [](const auto& info) { return info.param.preset == "qwen3-8b" ? "Qwen3Yarn" : "Llama31"; });

}  // namespace
}  // namespace sbp::testing
