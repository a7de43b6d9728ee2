#include "worker/model/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"
#include "tests/worker/model/test_util.h"

namespace sbp {
namespace {

using ::testing::HasSubstr;

// Qwen/Qwen3-0.6B config.json as published (transformers 4.51).
constexpr char kQwen3_0_6B[] = R"({
  "architectures": [
    "Qwen3ForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// TinyLlama/TinyLlama-1.1B style Llama config.
constexpr char kTinyLlama[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 5632,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 22,
  "num_key_value_heads": 4,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.35.0",
  "use_cache": true,
  "vocab_size": 32000
})";

// Qwen/Qwen2.5-0.5B style Qwen2 config (sliding_window set but unused).
constexpr char kQwen25_0_5B[] = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 24,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// kQwen3_0_6B with `"key": value` added (or replacing an existing key).
std::string Qwen3With(absl::string_view key, absl::string_view value) {
  nlohmann::json j = nlohmann::json::parse(kQwen3_0_6B);
  j[std::string(key)] = nlohmann::json::parse(value);
  return j.dump();
}

std::string Qwen3Without(absl::string_view key) {
  nlohmann::json j = nlohmann::json::parse(kQwen3_0_6B);
  j.erase(std::string(key));
  return j.dump();
}

// The parse error of `text`, which must fail with InvalidArgument.
std::string ErrorOf(absl::string_view text) {
  auto config = ParseModelConfig(text, "config.json");
  EXPECT_FALSE(config.ok()) << "parsed: " << text;
  if (config.ok()) return "";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("config.json: "));
  return std::string(config.status().message());
}

TEST(ModelConfig, EveryPresetRoundTripsThroughJson) {
  ASSERT_EQ(PresetNames().size(), 13u);
  for (const std::string& name : PresetNames()) {
    SCOPED_TRACE(name);
    auto preset = PresetConfig(name);
    ASSERT_TRUE(preset.ok()) << preset.status();
    ASSERT_TRUE(ValidateModelConfig(*preset, name).ok());
    const std::string json = ModelConfigToJson(*preset);
    auto parsed = ParseModelConfig(json, "config.json");
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << json;
    EXPECT_EQ(*parsed, *preset);
  }
}

TEST(ModelConfig, PresetShapes) {
  ModelConfig qwen3 = *PresetConfig("tiny-qwen3");
  EXPECT_EQ(qwen3.architecture, Architecture::kQwen3);
  EXPECT_EQ(qwen3.vocab_size, 256);
  EXPECT_EQ(qwen3.hidden_size, 64);
  EXPECT_EQ(qwen3.num_hidden_layers, 2);
  EXPECT_EQ(qwen3.num_attention_heads, 4);
  EXPECT_EQ(qwen3.num_key_value_heads, 2);
  EXPECT_EQ(qwen3.head_dim, 16);
  EXPECT_EQ(qwen3.intermediate_size, 192);
  EXPECT_FALSE(qwen3.tie_word_embeddings);
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_FALSE(qwen3.attention_bias);
  EXPECT_EQ(qwen3.rope_theta, 1e6);
  EXPECT_EQ(qwen3.rms_norm_eps, 1e-6);

  ModelConfig llama = *PresetConfig("tiny-llama");
  EXPECT_EQ(llama.architecture, Architecture::kLlama);
  EXPECT_EQ(llama.hidden_size, 64);
  EXPECT_EQ(llama.head_dim, 16);
  EXPECT_TRUE(llama.tie_word_embeddings);
  EXPECT_FALSE(llama.qk_norm);
  EXPECT_EQ(llama.rope_theta, 10000.0);
  EXPECT_EQ(llama.rms_norm_eps, 1e-5);

  ModelConfig qwen2 = *PresetConfig("tiny-qwen2");
  EXPECT_EQ(qwen2.architecture, Architecture::kQwen2);
  EXPECT_TRUE(qwen2.attention_bias);
  EXPECT_FALSE(qwen2.qk_norm);
  EXPECT_FALSE(qwen2.tie_word_embeddings);
  EXPECT_EQ(qwen2.rope_theta, 1e6);

  ModelConfig bench = *PresetConfig("bench-qwen3");
  EXPECT_EQ(bench.vocab_size, 151936);
  EXPECT_EQ(bench.hidden_size, 512);
  EXPECT_EQ(bench.num_hidden_layers, 4);
  EXPECT_EQ(bench.num_attention_heads, 8);
  EXPECT_EQ(bench.num_key_value_heads, 4);
  EXPECT_EQ(bench.head_dim, 64);
  EXPECT_EQ(bench.intermediate_size, 1536);
  EXPECT_FALSE(bench.tie_word_embeddings);

  ModelConfig b8 = *PresetConfig("qwen3-8b");
  EXPECT_EQ(b8.hidden_size, 4096);
  EXPECT_EQ(b8.num_hidden_layers, 36);
  EXPECT_EQ(b8.intermediate_size, 12288);
  EXPECT_FALSE(b8.tie_word_embeddings);
  EXPECT_TRUE(PresetConfig("qwen3-4b")->tie_word_embeddings);
  ModelConfig b14 = *PresetConfig("qwen3-14b");
  EXPECT_EQ(b14.hidden_size, 5120);
  EXPECT_EQ(b14.intermediate_size, 17408);
  EXPECT_EQ(b14.num_hidden_layers, 40);
  EXPECT_EQ(b14.num_attention_heads, 40);
  EXPECT_EQ(b14.num_key_value_heads, 8);
  EXPECT_FALSE(b14.tie_word_embeddings);
  ModelConfig b32 = *PresetConfig("qwen3-32b");
  EXPECT_EQ(b32.intermediate_size, 25600);
  EXPECT_EQ(b32.num_hidden_layers, 64);
  EXPECT_EQ(b32.num_attention_heads, 64);
  EXPECT_EQ(b32.head_dim, 128);
  EXPECT_EQ(b32.max_position_embeddings, 40960);
  EXPECT_EQ(PresetConfig("qwen3-1.7b")->intermediate_size, 6144);
}

TEST(ModelConfig, UnknownPresetListsTheKnownNames) {
  auto config = PresetConfig("qwen3-72b");
  ASSERT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("'qwen3-72b'"));
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("tiny-qwen3, tiny-llama, tiny-qwen2, bench-qwen3, qwen3-0.6b"));
}

TEST(ModelConfig, ParsesTheRealQwen3Config) {
  auto config = ParseModelConfig(kQwen3_0_6B, "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(*config, *PresetConfig("qwen3-0.6b"));
  EXPECT_EQ(config->rope_theta, 1e6);  // given as the integer 1000000
  EXPECT_EQ(config->torch_dtype, "bfloat16");
  EXPECT_EQ(config->bos_token_id, 151643);
  EXPECT_EQ(config->eos_token_ids, std::vector<int64_t>{151645});
}

TEST(ModelConfig, ParsesLlamaAndQwen2Configs) {
  auto llama = ParseModelConfig(kTinyLlama, "config.json");
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->architecture, Architecture::kLlama);
  EXPECT_EQ(llama->head_dim, 64);  // hidden / heads
  EXPECT_EQ(llama->num_key_value_heads, 4);
  EXPECT_FALSE(llama->qk_norm);
  EXPECT_FALSE(llama->attention_bias);
  EXPECT_EQ(llama->rms_norm_eps, 1e-5);

  auto qwen2 = ParseModelConfig(kQwen25_0_5B, "config.json");
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  EXPECT_EQ(qwen2->architecture, Architecture::kQwen2);
  EXPECT_EQ(qwen2->head_dim, 64);
  EXPECT_TRUE(qwen2->attention_bias);
  EXPECT_TRUE(qwen2->tie_word_embeddings);
}

TEST(ModelConfig, HuggingFaceDefaults) {
  // Qwen3Config defaults head_dim to 128 regardless of hidden / heads.
  auto qwen3 = ParseModelConfig(Qwen3Without("head_dim"), "config.json");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_EQ(qwen3->head_dim, 128);
  auto no_theta = ParseModelConfig(Qwen3Without("rope_theta"), "config.json");
  EXPECT_EQ(no_theta->rope_theta, 10000.0);

  // Llama: missing num_key_value_heads means multi-head attention.
  nlohmann::json llama = nlohmann::json::parse(kTinyLlama);
  llama.erase("num_key_value_heads");
  llama.erase("tie_word_embeddings");
  auto parsed = ParseModelConfig(llama.dump(), "config.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->num_key_value_heads, 32);
  EXPECT_FALSE(parsed->tie_word_embeddings);

  // model_type alone is enough.
  auto by_type = ParseModelConfig(Qwen3Without("architectures"), "config.json");
  ASSERT_TRUE(by_type.ok()) << by_type.status();
  EXPECT_EQ(by_type->architecture, Architecture::kQwen3);
}

TEST(ModelConfig, ParsesTransformers5Layout) {
  nlohmann::json j = nlohmann::json::parse(kQwen3_0_6B);
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j.erase("torch_dtype");
  j["rope_parameters"] = {{"rope_theta", 5000000.0}, {"rope_type", "default"}};
  j["dtype"] = "float16";
  j["layer_types"] = std::vector<std::string>(28, "full_attention");
  auto config = ParseModelConfig(j.dump(), "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope_theta, 5e6);
  EXPECT_EQ(config->torch_dtype, "float16");
}

TEST(ModelConfig, EosTokenListAndNullFields) {
  auto config = ParseModelConfig(Qwen3With("eos_token_id", "[151645, 151643]"), "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  auto json = nlohmann::json::parse(ModelConfigToJson(*config));
  EXPECT_EQ(json["eos_token_id"], nlohmann::json({151645, 151643}));
  auto null_bos = ParseModelConfig(Qwen3With("bos_token_id", "null"), "config.json");
  ASSERT_TRUE(null_bos.ok());
  EXPECT_FALSE(null_bos->bos_token_id.has_value());
}

TEST(ModelConfig, GqaDivisibilityMessage) {
  nlohmann::json j = nlohmann::json::parse(kQwen3_0_6B);
  j["num_key_value_heads"] = 3;
  EXPECT_EQ(ErrorOf(j.dump()),
            "config.json: field 'num_key_value_heads' must divide num_attention_heads "
            "(got 3 and 16)");
}

TEST(ModelConfig, RejectsMalformedJsonWithPosition) {
  EXPECT_THAT(ErrorOf("{\"hidden_size\": 12,,}"), HasSubstr("malformed JSON at byte 20"));
  EXPECT_THAT(ErrorOf(""), HasSubstr("malformed JSON"));
  EXPECT_THAT(ErrorOf("{\"rope_theta\": 1e999}"), HasSubstr("malformed JSON: "));
  EXPECT_THAT(ErrorOf("[1, 2]"), HasSubstr("expected a JSON object at the top level (got array)"));
}

TEST(ModelConfig, RejectsUnsupportedFeatures) {
  EXPECT_THAT(ErrorOf(Qwen3With("rope_scaling", R"({"rope_type": "dynamic", "factor": 4.0})")),
              HasSubstr("field 'rope_scaling' has rope_type 'dynamic', which is not supported "
                        "(supported: default, linear, llama3, yarn)"));
  EXPECT_THAT(ErrorOf(Qwen3With("rope_scaling", R"({"type": "longrope", "factor": 2.0})")),
              HasSubstr("rope_type 'longrope', which is not supported"));
  EXPECT_THAT(ErrorOf(Qwen3With("rope_scaling", R"({"rope_type": "default", "factor": 2.0})")),
              HasSubstr("field 'rope_scaling.factor' is 2 with rope_type 'default'"));
  EXPECT_THAT(ErrorOf(Qwen3With("rope_scaling", "1.5")), HasSubstr("must be an object or null"));
  EXPECT_THAT(ErrorOf(Qwen3With("model_type", "\"qwen3_moe\"")),
              HasSubstr("model_type 'qwen3_moe' is a mixture-of-experts model"));
  EXPECT_THAT(
      ErrorOf(absl::StrReplaceAll(Qwen3Without("architectures"), {{"\"qwen3\"", "\"qwen3_moe\""}})),
      HasSubstr("model_type 'qwen3_moe' is a mixture-of-experts model"));
  EXPECT_THAT(ErrorOf(Qwen3With("architectures", R"(["Qwen3MoeForCausalLM"])")),
              HasSubstr("'Qwen3MoeForCausalLM' is a mixture-of-experts model"));
  EXPECT_THAT(ErrorOf(Qwen3With("num_experts", "128")),
              HasSubstr("field 'num_experts' is 128: mixture-of-experts models are not"));
  EXPECT_THAT(ErrorOf(Qwen3With("num_local_experts", "8")), HasSubstr("'num_local_experts'"));
  EXPECT_TRUE(ParseModelConfig(Qwen3With("num_experts", "0"), "c").ok());
  EXPECT_THAT(ErrorOf(Qwen3With("use_sliding_window", "true")),
              HasSubstr("field 'use_sliding_window' is true: sliding-window attention"));
  EXPECT_THAT(ErrorOf(Qwen3With("layer_types", R"(["full_attention", "sliding_attention"])")),
              HasSubstr("field 'layer_types' has string \"sliding_attention\" at index 1"));
  EXPECT_THAT(ErrorOf(Qwen3With("mlp_bias", "true")), HasSubstr("field 'mlp_bias' is true"));
  EXPECT_THAT(ErrorOf(Qwen3With("hidden_act", "\"gelu\"")),
              HasSubstr("field 'hidden_act' is 'gelu': only 'silu'"));
  EXPECT_THAT(ErrorOf(Qwen3With("attention_bias", "true")),
              HasSubstr("field 'attention_bias' is true: Qwen3ForCausalLM then also has an "
                        "o_proj bias"));
  EXPECT_THAT(ErrorOf(Qwen3With("architectures", R"(["MistralForCausalLM"])")),
              HasSubstr("unsupported architecture 'MistralForCausalLM'"));
  EXPECT_THAT(ErrorOf(R"({"model_type": "gpt2", "vocab_size": 10})"),
              HasSubstr("unsupported model_type 'gpt2' (supported: qwen3, llama, qwen2)"));
  EXPECT_THAT(ErrorOf(R"({"vocab_size": 10})"),
              HasSubstr("neither 'architectures' nor 'model_type'"));
  EXPECT_THAT(ErrorOf(Qwen3With("model_type", "\"llama\"")),
              HasSubstr("architectures says 'Qwen3ForCausalLM' but model_type is 'llama'"));

  // Qwen2's q/k/v bias is built in; attention_bias there is not an error.
  nlohmann::json qwen2 = nlohmann::json::parse(kQwen25_0_5B);
  qwen2["attention_bias"] = true;
  EXPECT_TRUE(ParseModelConfig(qwen2.dump(), "c").ok());
}

TEST(ModelConfig, RejectsWrongTypes) {
  EXPECT_THAT(ErrorOf(Qwen3With("hidden_size", "\"1024\"")),
              HasSubstr("field 'hidden_size' must be an integer (got string \"1024\")"));
  EXPECT_THAT(ErrorOf(Qwen3With("hidden_size", "1024.5")),
              HasSubstr("field 'hidden_size' must be an integer (got number 1024.5)"));
  EXPECT_THAT(ErrorOf(Qwen3With("tie_word_embeddings", "\"yes\"")),
              HasSubstr("field 'tie_word_embeddings' must be true or false"));
  EXPECT_THAT(ErrorOf(Qwen3With("rms_norm_eps", "[1]")),
              HasSubstr("field 'rms_norm_eps' must be a number (got array)"));
  EXPECT_THAT(ErrorOf(Qwen3With("architectures", "\"Qwen3ForCausalLM\"")),
              HasSubstr("field 'architectures' must be a list of strings"));
  EXPECT_THAT(ErrorOf(Qwen3With("torch_dtype", "7")),
              HasSubstr("field 'torch_dtype' must be a string"));
  EXPECT_THAT(ErrorOf(Qwen3With("eos_token_id", "[1, \"x\"]")),
              HasSubstr("field 'eos_token_id' must be an integer"));
  EXPECT_THAT(ErrorOf(Qwen3With("vocab_size", "18446744073709551615")),
              HasSubstr("field 'vocab_size' is too large"));
}

TEST(ModelConfig, RejectsBadSizes) {
  EXPECT_THAT(ErrorOf(Qwen3With("hidden_size", "0")),
              HasSubstr("field 'hidden_size' must be positive (got 0)"));
  EXPECT_THAT(ErrorOf(Qwen3With("num_hidden_layers", "-2")),
              HasSubstr("field 'num_hidden_layers' must be positive (got -2)"));
  EXPECT_THAT(ErrorOf(Qwen3With("head_dim", "0")), HasSubstr("'head_dim' must be positive"));
  EXPECT_THAT(ErrorOf(Qwen3With("head_dim", "127")), HasSubstr("'head_dim' must be even"));
  {
    // Each within its own bound, but q's rows would not fit one BLAS dimension.
    nlohmann::json j = nlohmann::json::parse(Qwen3With("num_attention_heads", "4096"));
    j["head_dim"] = 1048576;
    EXPECT_THAT(ErrorOf(j.dump()), HasSubstr("'head_dim' times num_attention_heads is 4294967296"));
  }
  EXPECT_THAT(ErrorOf(Qwen3With("rms_norm_eps", "0")), HasSubstr("'rms_norm_eps' must be"));
  EXPECT_THAT(ErrorOf(Qwen3With("rope_theta", "-1")), HasSubstr("'rope_theta' must be"));
  EXPECT_THAT(ErrorOf(Qwen3With("intermediate_size", "1099511627776")),
              HasSubstr("'intermediate_size' must be at most 1048576"));
  EXPECT_THAT(ErrorOf(Qwen3Without("vocab_size")), HasSubstr("field 'vocab_size' is required"));
  EXPECT_THAT(ErrorOf(Qwen3Without("num_key_value_heads")),
              HasSubstr("field 'num_key_value_heads' is required"));
  nlohmann::json llama = nlohmann::json::parse(kTinyLlama);
  llama["num_attention_heads"] = 30;
  llama["num_key_value_heads"] = 5;
  EXPECT_THAT(ErrorOf(llama.dump()),
              HasSubstr("'head_dim' is absent and hidden_size 2048 is not divisible by "
                        "num_attention_heads 30"));
}

TEST(ModelConfig, LoadModelConfigNamesTheFile) {
  const std::string dir = testing::MakeTempDir("config");
  auto missing = LoadModelConfig(dir + "/config.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(dir + "/config.json"));

  testing::WriteFile(dir + "/config.json", Qwen3With("hidden_size", "-1"));
  auto bad = LoadModelConfig(dir + "/config.json");
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr(dir + "/config.json: field 'hidden_size' must be positive"));
  testing::WriteFile(dir + "/config.json", kQwen3_0_6B);
  auto good = LoadModelConfig(dir + "/config.json");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->hidden_size, 1024);
}

TEST(ModelConfig, JsonHasTheFieldsTransformersNeeds) {
  for (const char* name : {"tiny-qwen3", "tiny-llama", "tiny-qwen2"}) {
    SCOPED_TRACE(name);
    ModelConfig config = *PresetConfig(name);
    nlohmann::json j = nlohmann::json::parse(ModelConfigToJson(config));
    EXPECT_EQ(j["architectures"][0], std::string(ArchitectureClassName(config.architecture)));
    EXPECT_EQ(j["model_type"], std::string(ArchitectureModelType(config.architecture)));
    for (const char* key :
         {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
          "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta",
          "tie_word_embeddings", "max_position_embeddings", "torch_dtype", "dtype", "use_cache",
          "hidden_act", "attention_dropout", "rope_scaling"}) {
      EXPECT_TRUE(j.contains(key)) << key;
    }
    EXPECT_EQ(j["hidden_act"], "silu");
    EXPECT_TRUE(j["rope_scaling"].is_null());
    EXPECT_EQ(j["tie_word_embeddings"], config.tie_word_embeddings);
    if (config.architecture != Architecture::kLlama) {
      EXPECT_EQ(j["use_sliding_window"], false);
      EXPECT_TRUE(j["sliding_window"].is_null());
      EXPECT_EQ(j["max_window_layers"], config.num_hidden_layers);
    } else {
      EXPECT_EQ(j["attention_bias"], false);
      EXPECT_EQ(j["mlp_bias"], false);
    }
  }
}

TEST(ParameterSpecs, Qwen3LayoutAndOrder) {
  ModelConfig config = *PresetConfig("tiny-qwen3");
  const std::vector<ParamSpec> specs = ParameterSpecs(config);
  std::vector<std::string> names;
  for (const ParamSpec& spec : specs) names.push_back(spec.name);
  ASSERT_EQ(specs.size(), 1u + 2 * 11 + 2);
  EXPECT_EQ(names[0], "model.embed_tokens.weight");
  EXPECT_EQ(specs[0].shape, (Shape{256, 64}));
  const std::vector<std::string> layer0(names.begin() + 1, names.begin() + 12);
  EXPECT_EQ(layer0, (std::vector<std::string>{
                        "model.layers.0.input_layernorm.weight",
                        "model.layers.0.self_attn.q_proj.weight",
                        "model.layers.0.self_attn.k_proj.weight",
                        "model.layers.0.self_attn.v_proj.weight",
                        "model.layers.0.self_attn.o_proj.weight",
                        "model.layers.0.self_attn.q_norm.weight",
                        "model.layers.0.self_attn.k_norm.weight",
                        "model.layers.0.post_attention_layernorm.weight",
                        "model.layers.0.mlp.gate_proj.weight",
                        "model.layers.0.mlp.up_proj.weight",
                        "model.layers.0.mlp.down_proj.weight",
                    }));
  EXPECT_EQ(specs[2].shape, (Shape{64, 64}));    // q: 4 heads * 16
  EXPECT_EQ(specs[3].shape, (Shape{32, 64}));    // k: 2 heads * 16
  EXPECT_EQ(specs[5].shape, (Shape{64, 64}));    // o
  EXPECT_EQ(specs[6].shape, (Shape{16}));        // q_norm
  EXPECT_EQ(specs[9].shape, (Shape{192, 64}));   // gate
  EXPECT_EQ(specs[11].shape, (Shape{64, 192}));  // down
  EXPECT_EQ(names[12], "model.layers.1.input_layernorm.weight");
  EXPECT_EQ(specs[12].layer, 1);
  EXPECT_EQ(names[names.size() - 2], "model.norm.weight");
  EXPECT_EQ(names.back(), "lm_head.weight");
  EXPECT_EQ(specs.back().kind, ParamKind::kLmHead);
  EXPECT_EQ(specs.back().shape, (Shape{256, 64}));

  // The per-layer lists concatenate to the whole.
  std::vector<ParamSpec> joined = EmbeddingParameterSpecs(config);
  for (int layer = 0; layer < config.num_hidden_layers; ++layer) {
    for (const ParamSpec& spec : LayerParameterSpecs(config, layer)) {
      EXPECT_EQ(spec.layer, layer);
      joined.push_back(spec);
    }
  }
  for (const ParamSpec& spec : FinalParameterSpecs(config)) joined.push_back(spec);
  ASSERT_EQ(joined.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(joined[i].name, specs[i].name);
    EXPECT_EQ(joined[i].shape, specs[i].shape);
  }
}

TEST(ParameterSpecs, Qwen2BiasesAndTiedLlama) {
  ModelConfig qwen2 = *PresetConfig("tiny-qwen2");
  std::vector<ParamSpec> layer = LayerParameterSpecs(qwen2, 1);
  ASSERT_EQ(layer.size(), 12u);
  EXPECT_EQ(layer[1].name, "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(layer[2].name, "model.layers.1.self_attn.q_proj.bias");
  EXPECT_EQ(layer[2].shape, (Shape{64}));
  EXPECT_EQ(layer[2].kind, ParamKind::kBias);
  EXPECT_EQ(layer[4].name, "model.layers.1.self_attn.k_proj.bias");
  EXPECT_EQ(layer[4].shape, (Shape{32}));
  EXPECT_EQ(layer[6].name, "model.layers.1.self_attn.v_proj.bias");
  EXPECT_EQ(layer[7].name, "model.layers.1.self_attn.o_proj.weight");
  EXPECT_EQ(layer[8].name, "model.layers.1.post_attention_layernorm.weight");
  EXPECT_EQ(ParameterSpecs(qwen2).back().name, "lm_head.weight");

  ModelConfig llama = *PresetConfig("tiny-llama");
  EXPECT_EQ(LayerParameterSpecs(llama, 0).size(), 9u);
  EXPECT_EQ(ParameterSpecs(llama).back().name, "model.norm.weight");
  EXPECT_EQ(FinalParameterSpecs(llama).size(), 1u);
}

TEST(ParameterSpecs, KnownParameterCounts) {
  // Qwen3-0.6B (tied): embedding 151936*1024 = 155,582,464; each of 28 layers
  // 15,730,944 (attention 6,291,456 + MLP 9,437,184 + norms 2,304); final norm 1,024.
  EXPECT_EQ(ParameterCount(*PresetConfig("qwen3-0.6b")), 596049920);
  EXPECT_EQ(ParameterCount(*PresetConfig("qwen3-4b")), 4022468096);
  EXPECT_EQ(ParameterCount(*PresetConfig("qwen3-8b")), 8190735360);
  // Published: Qwen3-14B 14.8B, Qwen3-32B 32.8B (untied).
  EXPECT_EQ(ParameterCount(*PresetConfig("qwen3-14b")), 14768307200);
  EXPECT_EQ(ParameterCount(*PresetConfig("qwen3-32b")), 32762123264);
  // Published totals of Qwen2.5-0.5B (494,032,768) and TinyLlama-1.1B (1,100,048,384).
  EXPECT_EQ(ParameterCount(*ParseModelConfig(kQwen25_0_5B, "c")), 494032768);
  EXPECT_EQ(ParameterCount(*ParseModelConfig(kTinyLlama, "c")), 1100048384);
  // Tiny: embedding 16384 + 2 * (64+4096+2048+2048+4096+32+64+3*12288) + 64 + lm_head 16384.
  EXPECT_EQ(ParameterCount(*PresetConfig("tiny-qwen3")), 16384 + 2 * 49312 + 64 + 16384);
  EXPECT_EQ(ParameterCount(*PresetConfig("tiny-qwen2")),
            16384 + 2 * (49312 - 32 + 64 + 32 + 32) + 64 + 16384);
  ModelConfig config = *PresetConfig("tiny-qwen3");
  EXPECT_EQ(TotalElements(LayerParameterSpecs(config, 0)), 49312);
}

TEST(ModelConfig, EverySizeHasACeiling) {
  EXPECT_THAT(ErrorOf(Qwen3With("max_position_embeddings", "9223372036854775807")),
              HasSubstr("field 'max_position_embeddings' must be at most 67108864 (got "
                        "9223372036854775807)"));
  EXPECT_THAT(ErrorOf(Qwen3With("vocab_size", "18446744073709551615")),
              HasSubstr("field 'vocab_size' is too large"));
  EXPECT_THAT(ErrorOf(Qwen3With("num_key_value_heads", "8192")),
              HasSubstr("field 'num_key_value_heads' must be at most 4096 (got 8192)"));
  EXPECT_THAT(ErrorOf(Qwen3With("hidden_size", "1e30")),
              HasSubstr("field 'hidden_size' must be an integer"));
  // Each size within its own bound, the product not: 2^31 x 2^20 embedding
  // plus 28 layers of 2^20 x 2^20 MLPs.
  nlohmann::json big = nlohmann::json::parse(kQwen3_0_6B);
  big["vocab_size"] = 2147483647;
  big["hidden_size"] = 1 << 20;
  big["intermediate_size"] = 1 << 20;
  EXPECT_THAT(ErrorOf(big.dump()),
              HasSubstr("parameters, over the limit of 4398046511104 (check vocab_size"));
  // Configs built in code are held to the same bounds.
  ModelConfig config = *PresetConfig("qwen3-32b");
  EXPECT_TRUE(ValidateModelConfig(config, "c").ok());
  config.num_hidden_layers = 4096;
  config.intermediate_size = 1 << 20;
  EXPECT_THAT(std::string(ValidateModelConfig(config, "c").message()),
              HasSubstr("parameters, over the limit"));
  config = *PresetConfig("qwen3-32b");
  config.max_position_embeddings = int64_t{1} << 40;
  EXPECT_THAT(std::string(ValidateModelConfig(config, "c").message()),
              HasSubstr("field 'max_position_embeddings' must be at most 67108864"));
}

TEST(ModelConfig, DeepNestingIsRefusedBeforeParsing) {
  // 200,000 levels would overflow the stack when the value is copied or
  // printed; the check comes before the parser.
  const std::string deep =
      absl::StrCat("{\"architectures\": ", std::string(200000, '['), std::string(200000, ']'), "}");
  EXPECT_EQ(ErrorOf(deep), "config.json: JSON nested deeper than 64 levels (at byte 81)");
  EXPECT_THAT(ErrorOf(Qwen3With("rope_scaling", std::string(65, '[') + std::string(65, ']'))),
              HasSubstr("nested deeper than 64 levels"));
  // Shallow nesting in fields the runtime ignores is fine.
  EXPECT_TRUE(ParseModelConfig(Qwen3With("extra", "{\"a\": [[{\"b\": [1]}]]}"), "c").ok());
}

TEST(ModelConfig, OversizedTextIsRefused) {
  std::string text = kQwen3_0_6B;
  text.insert(1, std::string(kMaxModelConfigBytes, ' '));
  EXPECT_EQ(ErrorOf(text), absl::StrCat("config.json: has ", text.size(),
                                        " bytes, over the 1 MiB limit for config.json"));
}

TEST(ModelConfig, LoadModelConfigReadsOnlyRegularFilesOfBoundedSize) {
  namespace fs = std::filesystem;
  const std::string dir = testing::MakeTempDir("config-hostile");
  auto load_error = [](const std::string& path) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<ModelConfig> config = LoadModelConfig(path);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)) << path;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
    return std::string(config.status().message());
  };
  // A 20 GiB sparse file: refused by its size, nothing read.
  const std::string sparse = dir + "/sparse.json";
  testing::WriteFile(sparse, "{");
  fs::resize_file(sparse, uint64_t{20} << 30);
  EXPECT_EQ(load_error(sparse),
            sparse + ": has 21474836480 bytes, over the 1 MiB limit for config.json");
  // A FIFO with no writer would block a plain open; /dev/zero never ends.
  const std::string fifo = dir + "/fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(load_error(fifo),
            fifo + ": is a FIFO, not a regular file (only regular files are read)");
  fs::create_symlink("/dev/zero", dir + "/zero.json");
  EXPECT_EQ(load_error(dir + "/zero.json"), dir +
                                                "/zero.json: is a character device, not a "
                                                "regular file (only regular files are read)");
  EXPECT_THAT(load_error(dir), HasSubstr(dir + ": is a directory, not a regular file"));
  // Just under the limit is read and parsed.
  std::string padded = kQwen3_0_6B;
  padded.append(static_cast<size_t>(kMaxModelConfigBytes) - padded.size(), '\n');
  testing::WriteFile(dir + "/padded.json", padded);
  EXPECT_TRUE(LoadModelConfig(dir + "/padded.json").ok());
}

}  // namespace
}  // namespace sbp
