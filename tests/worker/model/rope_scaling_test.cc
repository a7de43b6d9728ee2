// RoPE scaling in config.json: every type in every spelling, the choices
// transformers makes between them, refusals that name the field, round trips
// through ModelConfigToJson, and the rotary tables against transformers'
// own (tests/reference/golden/rope-tables.json, written by
// tests/reference/generate_goldens.py from ROPE_INIT_FUNCTIONS).
#include "worker/model/rope_scaling.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numbers>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"
#include "worker/model/model_config.h"

namespace sbp {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string SourceDir() {
  const char* root = std::getenv("SBP_SOURCE_DIR");
  return root ? root : ".";
}

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(in.good() || in.eof()) << path;
  return Json::parse(text.str());
}

// A published config.json (tests/reference/configs/).
Json Published(const std::string& name) {
  return ReadJson(SourceDir() + "/tests/reference/configs/" + name + ".json");
}

// Qwen3-8B as published (rope_scaling null, rope_theta 1e6).
Json Qwen3() {
  Json j = Published("qwen3-8b-yarn");
  j["rope_scaling"] = nullptr;
  return j;
}

ModelConfig Parse(const Json& j) {
  auto config = ParseModelConfig(j.dump(), "config.json");
  EXPECT_TRUE(config.ok()) << config.status() << "\n" << j.dump(2);
  return config.ok() ? *config : ModelConfig{};
}

std::string ErrorOf(const Json& j) {
  auto config = ParseModelConfig(j.dump(), "config.json");
  EXPECT_FALSE(config.ok()) << "parsed: " << j.dump();
  if (config.ok()) return "";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  return std::string(config.status().message());
}

Json With(Json j, const std::string& key, Json value) {
  j[key] = std::move(value);
  return j;
}

const Json kYarn = {
    {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
const Json kLlama3 = {{"factor", 8.0},
                      {"low_freq_factor", 1.0},
                      {"high_freq_factor", 4.0},
                      {"original_max_position_embeddings", 8192},
                      {"rope_type", "llama3"}};

TEST(RopeScaling, PublishedLlamaConfigsAreThePresets) {
  for (const auto& [file, preset] : {std::pair{"llama-3.1-8b-instruct", "llama3.1-8b"},
                                     {"llama-3.2-1b-instruct", "llama3.2-1b"},
                                     {"llama-3.2-3b-instruct", "llama3.2-3b"}}) {
    SCOPED_TRACE(file);
    const ModelConfig parsed = Parse(Published(file));
    EXPECT_EQ(parsed, *PresetConfig(preset));
    EXPECT_EQ(parsed.rope_scaling.type, RopeType::kLlama3);
    EXPECT_EQ(parsed.rope_scaling.original_max_position_embeddings, 8192);
    EXPECT_EQ(parsed.rope_theta, 500000.0);
  }
  const ModelConfig b1 = *PresetConfig("llama3.2-1b");
  EXPECT_EQ(b1.rope_scaling.factor, 32.0);
  EXPECT_TRUE(b1.tie_word_embeddings);
  EXPECT_EQ(b1.head_dim, 64);
  const ModelConfig b8 = *PresetConfig("llama3.1-8b");
  EXPECT_EQ(b8.rope_scaling.factor, 8.0);
  EXPECT_FALSE(b8.tie_word_embeddings);
  EXPECT_EQ(b8.vocab_size, 128256);
  EXPECT_EQ(b8.head_dim, 128);
  EXPECT_EQ(b8.rms_norm_eps, 1e-5);
}

TEST(RopeScaling, Qwen3YarnInEverySpelling) {
  const ModelConfig yarn = Parse(Published("qwen3-8b-yarn"));
  EXPECT_EQ(yarn.rope_scaling.type, RopeType::kYarn);
  EXPECT_EQ(yarn.rope_scaling.factor, 4.0);
  EXPECT_EQ(yarn.rope_scaling.original_max_position_embeddings, 32768);
  EXPECT_FALSE(yarn.rope_scaling.beta_fast.has_value());
  EXPECT_EQ(yarn.rope_theta, 1e6);

  // transformers 4.x's older "type" key.
  Json old_key = kYarn;
  old_key.erase("rope_type");
  old_key["type"] = "yarn";
  EXPECT_EQ(Parse(With(Qwen3(), "rope_scaling", old_key)), yarn);
  // transformers 5: rope_parameters with rope_theta inside, nothing at the top.
  Json v5 = Qwen3();
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = kYarn;
  v5["rope_parameters"]["rope_theta"] = 1000000.0;
  EXPECT_EQ(Parse(v5), yarn);
}

TEST(RopeScaling, LinearAndLlama3InEverySpelling) {
  Json linear_old = With(Qwen3(), "rope_scaling", {{"type", "linear"}, {"factor", 2.0}});
  Json linear_new = With(Qwen3(), "rope_scaling", {{"rope_type", "linear"}, {"factor", 2}});
  Json linear_v5 = Qwen3();
  linear_v5.erase("rope_theta");
  linear_v5["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e6}};
  const ModelConfig linear = Parse(linear_old);
  EXPECT_EQ(linear.rope_scaling.type, RopeType::kLinear);
  EXPECT_EQ(linear.rope_scaling.factor, 2.0);
  EXPECT_EQ(Parse(linear_new), linear);
  EXPECT_EQ(Parse(linear_v5), linear);

  const Json llama31 = Published("llama-3.1-8b-instruct");
  Json old_key = llama31;
  old_key["rope_scaling"].erase("rope_type");
  old_key["rope_scaling"]["type"] = "llama3";
  Json v5 = llama31;
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = kLlama3;
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  EXPECT_EQ(Parse(old_key), Parse(llama31));
  EXPECT_EQ(Parse(v5), Parse(llama31));
}

TEST(RopeScaling, ChoosesAsTransformersDoes) {
  // A non-empty rope_scaling wins over rope_parameters, theta from the top level.
  Json both = With(Qwen3(), "rope_scaling", kYarn);
  both["rope_theta"] = 250000.0;
  both["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 7.0}};
  ModelConfig config = Parse(both);
  EXPECT_EQ(config.rope_scaling.type, RopeType::kYarn);
  EXPECT_EQ(config.rope_theta, 250000.0);
  // An empty one falls back to rope_parameters.
  both["rope_scaling"] = Json::object();
  config = Parse(both);
  EXPECT_EQ(config.rope_scaling.type, RopeType::kDefault);
  EXPECT_EQ(config.rope_theta, 7.0);
  // rope_type wins over type.
  config = Parse(
      With(Qwen3(), "rope_scaling", {{"type", "yarn"}, {"rope_type", "linear"}, {"factor", 3.0}}));
  EXPECT_EQ(config.rope_scaling.type, RopeType::kLinear);
  // original_max_position_embeddings: top level, else the object's, else max positions.
  Json llama = Published("llama-3.1-8b-instruct");
  llama["original_max_position_embeddings"] = 4096;
  EXPECT_EQ(Parse(llama).rope_scaling.original_max_position_embeddings, 4096);
  llama.erase("original_max_position_embeddings");
  llama["rope_scaling"].erase("original_max_position_embeddings");
  EXPECT_EQ(Parse(llama).rope_scaling.original_max_position_embeddings, 131072);
  // yarn's factor null: max_position_embeddings / original.
  Json yarn = kYarn;
  yarn["factor"] = nullptr;
  Json qwen = With(Qwen3(), "rope_scaling", yarn);
  qwen["max_position_embeddings"] = 131072;
  EXPECT_EQ(Parse(qwen).rope_scaling.factor, 4.0);
  // Optional yarn fields are kept as given.
  yarn = kYarn;
  yarn.update({{"beta_fast", 16},
               {"beta_slow", 2.0},
               {"attention_factor", 0.9},
               {"mscale", 1},
               {"mscale_all_dim", 0.5},
               {"truncate", false}});
  const RopeScaling s = Parse(With(Qwen3(), "rope_scaling", yarn)).rope_scaling;
  EXPECT_EQ(s.beta_fast, 16.0);
  EXPECT_EQ(s.beta_slow, 2.0);
  EXPECT_EQ(s.attention_factor, 0.9);
  EXPECT_EQ(s.mscale, 1.0);
  EXPECT_EQ(s.mscale_all_dim, 0.5);
  EXPECT_EQ(s.truncate, false);
}

TEST(RopeScaling, RefusesOtherTypesByName) {
  for (const char* type : {"dynamic", "longrope", "su", "proportional", "mrope"}) {
    EXPECT_THAT(ErrorOf(With(Qwen3(), "rope_scaling", {{"rope_type", type}, {"factor", 2.0}})),
                HasSubstr(std::string("config.json: field 'rope_scaling' has rope_type '") + type +
                          "', which is not supported (supported: default, linear, llama3, yarn)"));
  }
  Json v5 = Qwen3();
  v5["rope_parameters"] = {{"type", "dynamic"}, {"factor", 2.0}, {"rope_theta", 1e6}};
  EXPECT_THAT(ErrorOf(v5), HasSubstr("field 'rope_parameters' has rope_type 'dynamic'"));
}

TEST(RopeScaling, RefusesMalformedValuesNamingTheField) {
  auto yarn_with = [](const std::string& key, Json value) {
    Json yarn = kYarn;
    if (value.is_discarded()) {
      yarn.erase(key);
    } else {
      yarn[key] = std::move(value);
    }
    return With(Qwen3(), "rope_scaling", yarn);
  };
  const Json absent = Json(Json::value_t::discarded);
  EXPECT_THAT(ErrorOf(yarn_with("factor", 0)),
              HasSubstr("config.json: field 'rope_scaling.factor' must be positive (got 0)"));
  EXPECT_THAT(ErrorOf(yarn_with("factor", -2.5)),
              HasSubstr("field 'rope_scaling.factor' must be positive (got -2.5)"));
  EXPECT_THAT(ErrorOf(yarn_with("factor", "4")),
              HasSubstr("field 'rope_scaling.factor' must be a number (got string \"4\")"));
  EXPECT_THAT(ErrorOf(yarn_with("factor", absent)),
              HasSubstr("field 'rope_scaling.factor' is required for rope_type 'yarn'"));
  EXPECT_THAT(ErrorOf(yarn_with("original_max_position_embeddings", 0)),
              HasSubstr("field 'rope_scaling.original_max_position_embeddings' must be positive"));
  EXPECT_THAT(
      ErrorOf(yarn_with("original_max_position_embeddings", 8192.5)),
      HasSubstr("field 'rope_scaling.original_max_position_embeddings' must be an integer"));
  EXPECT_THAT(ErrorOf(yarn_with("beta_fast", -1)),
              HasSubstr("field 'rope_scaling.beta_fast' must not be negative (got -1)"));
  EXPECT_THAT(ErrorOf(yarn_with("beta_slow", Json::array())),
              HasSubstr("field 'rope_scaling.beta_slow' must be a number (got array)"));
  EXPECT_THAT(ErrorOf(yarn_with("attention_factor", 0.0)),
              HasSubstr("field 'rope_scaling.attention_factor' must be positive"));
  EXPECT_THAT(ErrorOf(yarn_with("truncate", "yes")),
              HasSubstr("field 'rope_scaling.truncate' must be true or false"));
  EXPECT_THAT(ErrorOf(yarn_with("rope_type", 3)),
              HasSubstr("field 'rope_scaling.rope_type' must be a string (got number 3)"));
  EXPECT_THAT(ErrorOf(yarn_with("partial_rotary_factor", 0.5)),
              HasSubstr("field 'rope_scaling.partial_rotary_factor' is 0.5: partial rotary"));

  const Json llama31 = Published("llama-3.1-8b-instruct");
  auto llama_with = [&](const std::string& key, Json value) {
    Json j = llama31;
    if (value.is_discarded()) {
      j["rope_scaling"].erase(key);
    } else {
      j["rope_scaling"][key] = std::move(value);
    }
    return j;
  };
  EXPECT_THAT(ErrorOf(llama_with("low_freq_factor", absent)),
              HasSubstr("field 'rope_scaling.low_freq_factor' is required for rope_type 'llama3'"));
  EXPECT_THAT(ErrorOf(llama_with("high_freq_factor", absent)),
              HasSubstr("field 'rope_scaling.high_freq_factor' is required"));
  EXPECT_THAT(ErrorOf(llama_with("factor", absent)),
              HasSubstr("field 'rope_scaling.factor' is required for rope_type 'llama3'"));
  EXPECT_THAT(ErrorOf(llama_with("low_freq_factor", 0)),
              HasSubstr("field 'rope_scaling.low_freq_factor' must be positive"));
  EXPECT_THAT(ErrorOf(llama_with("high_freq_factor", 1.0)),
              HasSubstr("field 'rope_scaling.high_freq_factor' must be greater than "
                        "low_freq_factor (got 1 and 1)"));
  Json top = llama31;
  top["original_max_position_embeddings"] = "8192";
  EXPECT_THAT(ErrorOf(top), HasSubstr("field 'original_max_position_embeddings' must be an "
                                      "integer"));
  EXPECT_THAT(ErrorOf(With(Qwen3(), "rope_scaling", {{"type", "linear"}})),
              HasSubstr("field 'rope_scaling.factor' is required for rope_type 'linear'"));
  EXPECT_THAT(ErrorOf(With(Qwen3(), "rope_parameters", "yarn")),
              HasSubstr("field 'rope_parameters' must be an object or null (got string"));
  EXPECT_THAT(ErrorOf(With(Qwen3(), "rope_theta", "1e6")),
              HasSubstr("field 'rope_theta' must be a number (got string"));
}

TEST(RopeScaling, RoundTripsThroughConfigJson) {
  Json yarn_full = kYarn;
  yarn_full.update({{"beta_fast", 16.0},
                    {"beta_slow", 2.0},
                    {"attention_factor", 0.9},
                    {"mscale", 1.0},
                    {"mscale_all_dim", 0.5},
                    {"truncate", false}});
  const std::vector<Json> configs = {
      Published("llama-3.1-8b-instruct"),
      Published("llama-3.2-1b-instruct"),
      Published("qwen3-8b-yarn"),
      With(Qwen3(), "rope_scaling", yarn_full),
      With(Qwen3(), "rope_scaling", {{"type", "linear"}, {"factor", 2.0}}),
      Qwen3(),
  };
  for (const Json& j : configs) {
    const ModelConfig config = Parse(j);
    SCOPED_TRACE(RopeTypeName(config.rope_scaling.type));
    const std::string text = ModelConfigToJson(config);
    EXPECT_EQ(Parse(Json::parse(text)), config) << text;
    // Both readers find it: transformers 4.x (rope_scaling + rope_theta) and
    // 5.x (the same, or rope_parameters with rope_theta inside).
    const Json written = Json::parse(text);
    EXPECT_EQ(written["rope_theta"], config.rope_theta);
    EXPECT_EQ(written["rope_parameters"]["rope_theta"], config.rope_theta);
    EXPECT_EQ(written["rope_parameters"]["rope_type"],
              std::string(RopeTypeName(config.rope_scaling.type)));
    if (config.rope_scaling.type == RopeType::kDefault) {
      EXPECT_TRUE(written["rope_scaling"].is_null());
    } else {
      Json without_theta = written["rope_parameters"];
      without_theta.erase("rope_theta");
      EXPECT_EQ(written["rope_scaling"], without_theta);
    }
    Json v5 = written;
    v5.erase("rope_scaling");
    v5.erase("rope_theta");
    EXPECT_EQ(Parse(v5), config);
  }
}

TEST(RopeScaling, PresetsValidateAndConfigsBuiltInCodeAreChecked) {
  for (const std::string& name : PresetNames()) {
    EXPECT_TRUE(ValidateModelConfig(*PresetConfig(name), name).ok()) << name;
  }
  ModelConfig config = *PresetConfig("llama3.1-8b");
  config.rope_scaling.high_freq_factor = 0.5;
  EXPECT_THAT(std::string(ValidateModelConfig(config, "code").message()),
              HasSubstr("field 'rope_scaling.high_freq_factor' must be greater than"));
  config = *PresetConfig("llama3.1-8b");
  config.rope_scaling.original_max_position_embeddings = 0;
  EXPECT_THAT(std::string(ValidateModelConfig(config, "code").message()),
              HasSubstr("'rope_scaling.original_max_position_embeddings' must be in"));
  config = *PresetConfig("qwen3-8b");
  config.rope_scaling.type = RopeType::kYarn;
  config.rope_scaling.factor = -1;
  EXPECT_THAT(std::string(ValidateModelConfig(config, "code").message()),
              HasSubstr("'rope_scaling.factor' must be a positive number"));
}

TEST(RopeTable, PlainAndLinearByHand) {
  RopeScaling plain;
  const RopeTable table = ComputeRopeTable(plain, 100.0, 4);
  EXPECT_EQ(table.inv_freq, (std::vector<double>{1.0, 0.1}));
  EXPECT_EQ(table.attention_scaling, 1.0);
  EXPECT_EQ(table, PlainRopeTable(4, 100.0));
  RopeScaling linear;
  linear.type = RopeType::kLinear;
  linear.factor = 4.0;
  EXPECT_EQ(ComputeRopeTable(linear, 100.0, 4).inv_freq, (std::vector<double>{0.25, 0.025}));
}

TEST(RopeTable, Llama3RegimesByHand) {
  // theta 1e4, d 16: wavelengths 2 pi 10^(i/2); original 32, low 1, high 4:
  // pair 0 (6.28 < 8) kept, pair 1 (19.9) smoothed, pairs 2.. (> 32) / 8.
  RopeScaling s;
  s.type = RopeType::kLlama3;
  s.factor = 8;
  s.original_max_position_embeddings = 32;
  const RopeTable t = ComputeRopeTable(s, 1e4, 16);
  const RopeTable plain = PlainRopeTable(16, 1e4);
  EXPECT_EQ(t.inv_freq[0], plain.inv_freq[0]);
  const double smooth = (32 / (2 * std::numbers::pi / plain.inv_freq[1]) - 1) / 3;
  EXPECT_NEAR(t.inv_freq[1], (1 - smooth) * plain.inv_freq[1] / 8 + smooth * plain.inv_freq[1],
              1e-15);
  for (size_t i = 2; i < 8; ++i) EXPECT_DOUBLE_EQ(t.inv_freq[i], plain.inv_freq[i] / 8) << i;
}

// Every case of rope-tables.json: the config.json parses, and its table
// equals transformers' (float32 frequencies, so 1e-6 relative).
TEST(RopeTable, MatchesTransformers) {
  const Json golden = ReadJson(SourceDir() + "/tests/reference/golden/rope-tables.json");
  ASSERT_GE(golden["cases"].size(), 20u);
  for (const Json& c : golden["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const ModelConfig config = Parse(c["config"]);
    EXPECT_EQ(RopeTypeName(config.rope_scaling.type), c["rope_type"].get<std::string>());
    const RopeTable table = config.rope_table();
    const std::vector<double> want = c["inv_freq"];
    ASSERT_EQ(table.inv_freq.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(table.inv_freq[i] - want[i]) / want[i]);
    }
    EXPECT_LE(worst, 1e-6);
    EXPECT_NEAR(table.attention_scaling, c["attention_scaling"].get<double>(), 1e-12);
  }
}

}  // namespace
}  // namespace sbp
