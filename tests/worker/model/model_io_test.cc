#include "worker/model/model_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "tests/worker/model/test_util.h"

namespace sbp {
namespace {

using ::testing::HasSubstr;

bool SameValues(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

void ExpectSameWeights(const ModelWeights& a, const ModelWeights& b) {
  EXPECT_EQ(a.config, b.config);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_EQ(a.params[i].first, b.params[i].first);
    EXPECT_TRUE(SameValues(a.params[i].second, b.params[i].second)) << a.params[i].first;
  }
}

int CountShardFiles(const std::string& dir) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    count += entry.path().filename().string().rfind("model-", 0) == 0;
  }
  return count;
}

// Writes config.json and model.safetensors with exactly `tensors`.
void WriteRawModel(const std::string& dir, const ModelConfig& config, const NamedTensors& tensors) {
  testing::WriteFile(dir + "/config.json", ModelConfigToJson(config));
  ASSERT_TRUE(
      WriteSafetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}}, DType::kF32).ok());
}

TEST(InitModelWeights, FollowsSpecsAndHuggingFaceInit) {
  CpuAllocator alloc;
  for (const char* name : {"tiny-qwen3", "tiny-llama", "tiny-qwen2"}) {
    SCOPED_TRACE(name);
    const ModelConfig config = *PresetConfig(name);
    auto weights = InitModelWeights(config, 42, alloc);
    ASSERT_TRUE(weights.ok()) << weights.status();
    const std::vector<ParamSpec> specs = ParameterSpecs(config);
    ASSERT_EQ(weights->params.size(), specs.size());
    int64_t total = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto& [param_name, tensor] = weights->params[i];
      EXPECT_EQ(param_name, specs[i].name);
      EXPECT_EQ(tensor.shape(), specs[i].shape);
      EXPECT_EQ(tensor.dtype(), DType::kF32);
      total += tensor.numel();
      const float* data = tensor.data<float>();
      if (specs[i].kind == ParamKind::kNorm) {
        for (int64_t j = 0; j < tensor.numel(); ++j) ASSERT_EQ(data[j], 1.0f) << param_name;
      } else {
        double sum = 0, sum_sq = 0;
        for (int64_t j = 0; j < tensor.numel(); ++j) {
          sum += data[j];
          sum_sq += static_cast<double>(data[j]) * data[j];
        }
        const double n = static_cast<double>(tensor.numel());
        const double std = std::sqrt(sum_sq / n - (sum / n) * (sum / n));
        EXPECT_NEAR(sum / n, 0.0, 6 * 0.02 / std::sqrt(n)) << param_name;
        EXPECT_NEAR(std, 0.02, n >= 1000 ? 0.002 : 0.008) << param_name;
      }
    }
    EXPECT_EQ(total, ParameterCount(config));
  }
}

TEST(InitModelWeights, SeededAndIndependent) {
  CpuAllocator alloc;
  const ModelConfig config = *PresetConfig("tiny-qwen2");
  ModelWeights a = *InitModelWeights(config, 7, alloc);
  ModelWeights b = *InitModelWeights(config, 7, alloc);
  ModelWeights c = *InitModelWeights(config, 8, alloc);
  ExpectSameWeights(a, b);
  EXPECT_FALSE(SameValues(a.params[1 + 1].second, c.params[1 + 1].second));
  // Same-shaped tensors of one model differ (per-parameter seeds).
  EXPECT_FALSE(SameValues(*a.Find("model.layers.0.self_attn.q_proj.weight"),
                          *a.Find("model.layers.1.self_attn.q_proj.weight")));
  EXPECT_FALSE(SameValues(*a.Find("model.layers.0.self_attn.k_proj.weight"),
                          *a.Find("model.layers.0.self_attn.v_proj.weight")));
  // Biases are small random values, not zeros.
  const Tensor* bias = a.Find("model.layers.0.self_attn.q_proj.bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_NE(bias->data<float>()[0], 0.0f);
  EXPECT_EQ(a.Find("nope"), nullptr);
  EXPECT_EQ(a.Get("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(a.Get("lm_head.weight").ok());
}

TEST(ModelDirectory, SaveLoadRoundTripF32) {
  CpuAllocator alloc;
  for (const char* name : {"tiny-qwen3", "tiny-llama", "tiny-qwen2"}) {
    SCOPED_TRACE(name);
    const std::string dir = testing::MakeTempDir("model") + "/" + name;
    ModelWeights weights = *InitModelWeights(*PresetConfig(name), 1, alloc);
    ASSERT_TRUE(SaveModelDirectory(dir, weights, DType::kF32).ok());
    EXPECT_TRUE(std::filesystem::exists(dir + "/config.json"));
    EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors"));
    EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
    auto file = SafetensorsFile::Open(dir + "/model.safetensors");
    ASSERT_TRUE(file.ok());
    EXPECT_EQ(file->metadata().at("format"), "pt");
    EXPECT_EQ(file->names().size(), weights.params.size());
    EXPECT_EQ(file->Contains("lm_head.weight"), !weights.config.tie_word_embeddings);

    auto loaded = LoadModelDirectory(dir, alloc);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ExpectSameWeights(*loaded, weights);
  }
}

TEST(ModelDirectory, SaveLoadRoundTripBf16AndShards) {
  CpuAllocator alloc;
  const ModelConfig config = *PresetConfig("tiny-qwen3");
  ModelWeights weights = *InitModelWeights(config, 3, alloc);
  const std::string root = testing::MakeTempDir("model");

  ASSERT_TRUE(SaveModelDirectory(root + "/bf16", weights, DType::kBF16).ok());
  ModelWeights bf16 = *LoadModelDirectory(root + "/bf16", alloc);
  for (size_t i = 0; i < weights.params.size(); ++i) {
    const Tensor& original = weights.params[i].second;
    const Tensor& back = bf16.params[i].second;
    for (int64_t j = 0; j < original.numel(); ++j) {
      ASSERT_EQ(back.data<float>()[j], Bf16ToFloat(FloatToBf16(original.data<float>()[j])));
    }
  }

  // 64 KiB shards: the 64 KiB embedding fills the first one; layers need several.
  ASSERT_TRUE(SaveModelDirectory(root + "/sharded", weights, DType::kF32, 64 << 10).ok());
  EXPECT_FALSE(std::filesystem::exists(root + "/sharded/model.safetensors"));
  const nlohmann::json index =
      nlohmann::json::parse(testing::ReadFile(root + "/sharded/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], ParameterCount(config) * 4);
  EXPECT_EQ(index["weight_map"].size(), weights.params.size());
  const int shards = CountShardFiles(root + "/sharded");
  EXPECT_GT(shards, 4);
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"],
            absl::StrFormat("model-00001-of-%05d.safetensors", shards));
  auto loaded = LoadModelDirectory(root + "/sharded", alloc);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameWeights(*loaded, weights);
}

TEST(ModelDirectory, OverwriteSwitchesLayoutAndKeepsOtherFiles) {
  CpuAllocator alloc;
  const std::string dir = testing::MakeTempDir("model");
  ModelWeights first = *InitModelWeights(*PresetConfig("tiny-qwen3"), 1, alloc);
  testing::WriteFile(dir + "/tokenizer.json", "{}");
  ASSERT_TRUE(SaveModelDirectory(dir, first, DType::kF32, 64 << 10).ok());
  EXPECT_GT(CountShardFiles(dir), 4);

  ModelWeights second = *InitModelWeights(*PresetConfig("tiny-llama"), 2, alloc);
  ASSERT_TRUE(SaveModelDirectory(dir + "/", second, DType::kF32).ok());
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files,
            (std::vector<std::string>{"config.json", "model.safetensors", "tokenizer.json"}));
  ExpectSameWeights(*LoadModelDirectory(dir, alloc), second);

  // And back to shards: the stale single file goes.
  ASSERT_TRUE(SaveModelDirectory(dir, first, DType::kF32, 64 << 10).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
  ExpectSameWeights(*LoadModelDirectory(dir, alloc), first);
  // No temporary directories or files are left behind.
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
  }
  const std::string parent = std::filesystem::path(dir).parent_path().string();
  for (const auto& entry : std::filesystem::directory_iterator(parent)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
  }
}

TEST(ModelDirectory, SaveRejectsMismatchedParameters) {
  CpuAllocator alloc;
  const std::string dir = testing::MakeTempDir("model") + "/out";
  const ModelConfig config = *PresetConfig("tiny-llama");
  ModelWeights weights = *InitModelWeights(config, 1, alloc);

  NamedTensors missing(weights.params.begin() + 1, weights.params.end());
  EXPECT_THAT(std::string(SaveModelDirectory(dir, config, missing, DType::kF32).message()),
              HasSubstr("parameter 'model.embed_tokens.weight' (shape [256, 64]) is missing"));
  NamedTensors extra = weights.params;
  extra.emplace_back("lm_head.weight", weights.params[0].second);  // tied model
  EXPECT_THAT(std::string(SaveModelDirectory(dir, config, extra, DType::kF32).message()),
              HasSubstr("parameter 'lm_head.weight' is not part of a LlamaForCausalLM"));
  NamedTensors wrong = weights.params;
  wrong[1].second = wrong[1].second.Reshape({1, 64});
  EXPECT_THAT(
      std::string(SaveModelDirectory(dir, config, wrong, DType::kF32).message()),
      HasSubstr("'model.layers.0.input_layernorm.weight' has shape [1, 64], expected [64]"));
  EXPECT_FALSE(SaveModelDirectory(dir, config, weights.params, DType::kI32).ok());
  ModelConfig bad = config;
  bad.num_key_value_heads = 3;
  EXPECT_THAT(std::string(SaveModelDirectory(dir, bad, weights.params, DType::kF32).message()),
              HasSubstr("must divide num_attention_heads (got 3 and 4)"));
  EXPECT_FALSE(std::filesystem::exists(dir));

  // Parameters in any order are written in Hugging Face order.
  NamedTensors reversed(weights.params.rbegin(), weights.params.rend());
  ASSERT_TRUE(SaveModelDirectory(dir, config, reversed, DType::kF32).ok());
  EXPECT_EQ(SafetensorsFile::Open(dir + "/model.safetensors")->names().front(),
            "model.embed_tokens.weight");
}

TEST(ModelDirectory, LoadReportsMissingAndMisshapenTensors) {
  CpuAllocator alloc;
  const ModelConfig config = *PresetConfig("tiny-qwen3");
  ModelWeights weights = *InitModelWeights(config, 1, alloc);

  const std::string missing_dir = testing::MakeTempDir("model");
  NamedTensors missing;
  for (const auto& named : weights.params) {
    if (named.first != "model.layers.1.self_attn.k_norm.weight") missing.push_back(named);
  }
  WriteRawModel(missing_dir, config, missing);
  auto status = LoadModelDirectory(missing_dir, alloc).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(missing_dir + ": tensor 'model.layers.1.self_attn.k_norm.weight' "
                                      "(shape [16]) is missing"));

  const std::string shape_dir = testing::MakeTempDir("model");
  NamedTensors wrong = weights.params;
  for (auto& named : wrong) {
    if (named.first == "model.layers.0.mlp.down_proj.weight") {
      named.second = named.second.Reshape({192, 64});  // transposed shape
    }
  }
  WriteRawModel(shape_dir, config, wrong);
  status = LoadModelDirectory(shape_dir, alloc).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("tensor 'model.layers.0.mlp.down_proj.weight' has shape [192, 64], "
                        "expected [64, 192]"));

  const std::string empty_dir = testing::MakeTempDir("model");
  EXPECT_EQ(LoadModelDirectory(empty_dir, alloc).status().code(), absl::StatusCode::kNotFound);
  testing::WriteFile(empty_dir + "/config.json", ModelConfigToJson(config));
  EXPECT_THAT(std::string(LoadModelDirectory(empty_dir, alloc).status().message()),
              HasSubstr("no model.safetensors"));
}

TEST(ModelDirectory, ExtraTensorsAndTiedHeads) {
  CpuAllocator alloc;
  const ModelConfig config = *PresetConfig("tiny-llama");  // tied
  ModelWeights weights = *InitModelWeights(config, 1, alloc);

  const std::string extra_dir = testing::MakeTempDir("model");
  NamedTensors extra = weights.params;
  extra.emplace_back("model.layers.0.mlp.extra.weight", weights.params[1].second);
  WriteRawModel(extra_dir, config, extra);
  EXPECT_THAT(std::string(LoadModelDirectory(extra_dir, alloc).status().message()),
              HasSubstr("1 unexpected tensor(s) for LlamaForCausalLM with this config.json: "
                        "model.layers.0.mlp.extra.weight"));

  // Rotary buffers of old checkpoints and a tied head equal to the embedding are fine.
  const std::string tied_dir = testing::MakeTempDir("model");
  NamedTensors tied = weights.params;
  Tensor inv_freq = *Tensor::Zeros(alloc, {8}, DType::kF32);
  tied.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", inv_freq);
  tied.emplace_back("lm_head.weight", weights.params[0].second);
  WriteRawModel(tied_dir, config, tied);
  auto loaded = LoadModelDirectory(tied_dir, alloc);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameWeights(*loaded, weights);
  EXPECT_EQ(loaded->Find("lm_head.weight"), nullptr);

  const std::string differ_dir = testing::MakeTempDir("model");
  NamedTensors differ = weights.params;
  Tensor other = *Tensor::Zeros(alloc, {256, 64}, DType::kF32);
  differ.emplace_back("lm_head.weight", other);
  WriteRawModel(differ_dir, config, differ);
  EXPECT_THAT(std::string(LoadModelDirectory(differ_dir, alloc).status().message()),
              HasSubstr("tie_word_embeddings is true but 'lm_head.weight' differs"));

  // A tied head stored in another dtype (and shard) is compared by value.
  const std::string mixed_dir = testing::MakeTempDir("model");
  Tensor embedding = weights.params[0].second;
  for (int64_t i = 0; i < embedding.numel(); ++i) {
    embedding.data<float>()[i] = Bf16ToFloat(FloatToBf16(embedding.data<float>()[i]));
  }
  testing::WriteFile(mixed_dir + "/config.json", ModelConfigToJson(config));
  ASSERT_TRUE(WriteSafetensors(mixed_dir + "/a.safetensors", weights.params, {}, DType::kF32).ok());
  ASSERT_TRUE(WriteSafetensors(mixed_dir + "/b.safetensors", {{"lm_head.weight", embedding}}, {},
                               DType::kBF16)
                  .ok());
  nlohmann::json index;
  for (const auto& named : weights.params) index["weight_map"][named.first] = "a.safetensors";
  index["weight_map"]["lm_head.weight"] = "b.safetensors";
  testing::WriteFile(mixed_dir + "/model.safetensors.index.json", index.dump());
  auto mixed = LoadModelDirectory(mixed_dir, alloc);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  ExpectSameWeights(*mixed, weights);
  embedding.data<float>()[5] += 1.0f;
  ASSERT_TRUE(WriteSafetensors(mixed_dir + "/b.safetensors", {{"lm_head.weight", embedding}}, {},
                               DType::kBF16)
                  .ok());
  EXPECT_THAT(std::string(LoadModelDirectory(mixed_dir, alloc).status().message()),
              HasSubstr("'lm_head.weight' differs"));

  // An untied model needs its head.
  ModelConfig untied = config;
  untied.tie_word_embeddings = false;
  const std::string untied_dir = testing::MakeTempDir("model");
  WriteRawModel(untied_dir, untied, weights.params);
  EXPECT_THAT(std::string(LoadModelDirectory(untied_dir, alloc).status().message()),
              HasSubstr("tensor 'lm_head.weight' (shape [256, 64]) is missing"));
}

TEST(ModelDirectory, LoadRespectsTheAllocatorBudget) {
  CpuAllocator alloc;
  const ModelConfig config = *PresetConfig("tiny-qwen3");
  const std::string dir = testing::MakeTempDir("model") + "/m";
  ASSERT_TRUE(SaveModelDirectory(dir, *InitModelWeights(config, 1, alloc), DType::kBF16).ok());
  CpuAllocator small;
  small.set_budget_bytes(100 << 10);
  auto status = LoadModelDirectory(dir, small).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(small.current_bytes(), 0);
}

}  // namespace
}  // namespace sbp
