// `lora merge`: the merged weights are W + s B A computed independently (in
// double), untargeted tensors are unchanged, the merged model computes what
// the base + adapter computes, and the base's dtype is kept.
#include "worker/train/lora_merge.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/random.h"
#include "kernels/tensor_checks.h"
#include "nlohmann/json.hpp"
#include "tests/worker/engine/engine_test_util.h"
#include "tests/worker/train/test_util.h"
#include "worker/engine/batch.h"
#include "worker/engine/lora_store.h"
#include "worker/model/model_io.h"
#include "worker/model/safetensors.h"
#include "worker/train/peft_adapter.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

class LoraMergeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = train_testing::MakeTempDir("lora_merge");
    config_ = *PresetConfig("tiny-qwen3");
    options_.r = 3;
    options_.alpha = 5;
    options_.target_modules = {"q_proj", "v_proj", "o_proj", "up_proj", "down_proj"};
  }

  // A base model directory and a random adapter directory.
  void Write(const std::string& torch_dtype) {
    auto weights = InitModelWeights(config_, 21, allocator_);
    ASSERT_TRUE(weights.ok());
    weights->config.torch_dtype = torch_dtype;
    ASSERT_TRUE(SaveModelDirectory(root_ + "/base", *weights,
                                   torch_dtype == "bfloat16" ? DType::kBF16 : DType::kF32)
                    .ok());
    auto adapters = CreateLoraStore(config_, options_, allocator_, "adapters");
    ASSERT_TRUE(adapters.ok());
    uint64_t seed = 50;
    for (auto& [name, t] : adapters->NamedTensors()) {
      Tensor view = t;
      FillNormal(view, ++seed, 0.0f, 0.2f);
    }
    fs::create_directories(root_ + "/adapter");
    ASSERT_TRUE(SavePeftAdapter(root_ + "/adapter", *adapters).ok());
    adapters_ = *std::move(adapters);
  }

  std::string root_;
  CpuAllocator allocator_;
  ModelConfig config_;
  LoraOptions options_;
  ParameterStore adapters_;
};

TEST_F(LoraMergeTest, MergedWeightsAreBasePlusScaledBA) {
  Write("float32");
  auto summary = MergeLoraAdapter(root_ + "/base", root_ + "/adapter", root_ + "/merged");
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ((*summary)["merged"], 5 * config_.num_hidden_layers);
  auto base = LoadModelDirectory(root_ + "/base", allocator_);
  auto merged = LoadModelDirectory(root_ + "/merged", allocator_);
  ASSERT_TRUE(base.ok() && merged.ok()) << merged.status();
  const double s = 5.0 / 3.0;
  // base weight name -> (A, B)
  std::map<std::string, std::pair<Tensor, Tensor>> adapter_of;
  const auto named = adapters_.NamedTensors();
  for (size_t i = 0; i + 1 < named.size(); i += 2) {
    std::string key = named[i].first.substr(std::string("base_model.model.").size());
    adapter_of[key.substr(0, key.find(".lora_A")) + ".weight"] = {named[i].second,
                                                                  named[i + 1].second};
  }
  int changed = 0;
  for (const auto& [name, w] : base->params) {
    const Tensor* m = merged->Find(name);
    ASSERT_NE(m, nullptr) << name;
    const auto found = adapter_of.find(name);
    if (found == adapter_of.end()) {
      EXPECT_EQ(RelativeError(*m, w), 0.0) << name;
      continue;
    }
    ++changed;
    const auto& [a, b] = found->second;
    const int64_t out = w.dim(0), in = w.dim(1), r = a.dim(0);
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < out; ++i) {
      for (int64_t j = 0; j < in; ++j) {
        double expected = w.data<float>()[i * in + j];
        for (int64_t k = 0; k < r; ++k) {
          expected += s * double{b.data<float>()[i * r + k]} * a.data<float>()[k * in + j];
        }
        const double d = m->data<float>()[i * in + j] - expected;
        diff += d * d;
        norm += expected * expected;
      }
    }
    EXPECT_LE(std::sqrt(diff / norm), 1e-6) << name;
  }
  EXPECT_EQ(changed, 5 * config_.num_hidden_layers);
}

TEST_F(LoraMergeTest, MergedModelComputesWhatTheAdapterModelComputes) {
  Write("float32");
  ASSERT_TRUE(MergeLoraAdapter(root_ + "/base", root_ + "/adapter", root_ + "/merged").ok());
  CpuBackend backend(allocator_);
  auto base = ParameterStore::Load(root_ + "/base", allocator_, "base");
  auto merged = ParameterStore::Load(root_ + "/merged", allocator_, "merged");
  ASSERT_TRUE(base.ok() && merged.ok());
  const auto batch = testing::MakeBatch(config_, {17, 9}, 3);
  Engine engine(config_, backend, {BackwardMode::kStream, 4, 4});
  ModelTensors with_adapter = BindModelTensors(*base);
  AttachAdapters(adapters_, with_adapter);
  auto a = SftForward(engine, with_adapter, batch);
  auto b = SftForward(engine, BindModelTensors(*merged), batch);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(a->loss, b->loss, 1e-6 * a->loss);
  auto plain = SftForward(engine, BindModelTensors(*base), batch);
  EXPECT_GT(std::abs(plain->loss - a->loss), 1e-3);  // the adapter matters
}

TEST_F(LoraMergeTest, KeepsTheBaseDtypeAndOtherFiles) {
  Write("bfloat16");
  train_testing::WriteFile(root_ + "/base/tokenizer.json", "{}");
  auto summary = MergeLoraAdapter(root_ + "/base", root_ + "/adapter", root_ + "/merged");
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ((*summary)["dtype"], "bfloat16");
  auto file = SafetensorsFile::Open(root_ + "/merged/model.safetensors");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*file->dtype("model.layers.0.self_attn.q_proj.weight"), SafetensorsDType::kBF16);
  EXPECT_TRUE(fs::exists(root_ + "/merged/tokenizer.json"));
  auto config = LoadModelConfig(root_ + "/merged/config.json");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->torch_dtype, "bfloat16");
}

TEST_F(LoraMergeTest, ErrorsNameTheFile) {
  Write("float32");
  auto missing = MergeLoraAdapter(root_ + "/base", root_ + "/nowhere", root_ + "/merged");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nowhere/adapter_config.json"), std::string::npos)
      << missing.status();
  // Fields of the wrong JSON type are errors naming them (they used to throw).
  for (const auto& [field, value, expected] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"peft_type", "5", "peft_type must be \"LORA\" (got 5)"},
           {"use_rslora", "\"no\"", "use_rslora must be true or false (got \"no\")"}}) {
    fs::create_directories(root_ + "/typed");
    nlohmann::json config = nlohmann::json::parse(PeftAdapterConfigJson(LoraOptions{}));
    config[field] = nlohmann::json::parse(value);
    std::ofstream(root_ + "/typed/adapter_config.json") << config.dump();
    auto typed = ReadPeftAdapterConfig(root_ + "/typed");
    ASSERT_FALSE(typed.ok()) << field;
    EXPECT_EQ(typed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(typed.status().message().find(expected), std::string::npos) << typed.status();
  }
  // Another model's shapes.
  auto other = InitModelWeights(*PresetConfig("tiny-llama"), 1, allocator_);
  other->config.hidden_size = 32;
  other->config.intermediate_size = 64;
  auto small = InitModelWeights(other->config, 1, allocator_);
  ASSERT_TRUE(small.ok());
  ASSERT_TRUE(SaveModelDirectory(root_ + "/small", *small, DType::kF32).ok());
  auto mismatch = MergeLoraAdapter(root_ + "/small", root_ + "/adapter", root_ + "/merged2");
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("adapter_model.safetensors"), std::string::npos)
      << mismatch.status();
  EXPECT_FALSE(fs::exists(root_ + "/merged2"));
}

}  // namespace
}  // namespace sbp
