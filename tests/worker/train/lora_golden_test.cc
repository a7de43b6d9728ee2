// LoRA against peft + transformers: an adapter made by peft's save_pretrained
// (tests/reference/generate_lora_goldens.py) loads as the runtime's adapter
// store, and the loss, the logits and the gradient of every lora_A / lora_B
// equal those of the real PeftModel over Qwen3ForCausalLM in float64, for SFT
// and DPO (policy: base + adapter, reference: the base), in every mode.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/tensor_checks.h"
#include "nlohmann/json.hpp"
#include "tests/reference/golden_files.h"
#include "worker/engine/batch.h"
#include "worker/engine/lora_store.h"
#include "worker/model/model_io.h"
#include "worker/model/safetensors.h"
#include "worker/train/jsonl_data.h"
#include "worker/train/objectives/dpo.h"
#include "worker/train/peft_adapter.h"

namespace sbp {
namespace {

constexpr double kTolerance = 1e-5;

using golden::CaptureLogits;
using golden::GoldenDir;
using golden::ReadJson;

class LoraGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = std::make_unique<CpuBackend>(allocator_);
    auto loaded = LoadModelDirectory(GoldenDir("tiny-qwen3"), allocator_);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    config_ = loaded->config;
    auto base = ParameterStore::FromWeights(*loaded, allocator_, "base");
    ASSERT_TRUE(base.ok());
    base_ = *std::move(base);
    auto options = ReadPeftAdapterConfig(dir_);
    ASSERT_TRUE(options.ok()) << options.status();
    auto adapters = CreateLoraStore(config_, *options, allocator_, "adapters");
    ASSERT_TRUE(adapters.ok()) << adapters.status();
    adapters_ = *std::move(adapters);
    ASSERT_TRUE(LoadPeftAdapter(dir_, adapters_).ok());
    golden_ = ReadJson(dir_ + "/golden.json");
  }

  ModelTensors Policy() const {
    ModelTensors w = BindModelTensors(base_);
    AttachAdapters(adapters_, w);
    return w;
  }

  void ExpectGradients(const ParameterStore& grads, const std::string& file,
                       const std::string& label) {
    auto expected_file = SafetensorsFile::Open(dir_ + "/" + file);
    ASSERT_TRUE(expected_file.ok()) << expected_file.status();
    const auto named = grads.NamedTensors();
    ASSERT_EQ(named.size(), expected_file->names().size());
    for (const auto& [name, tensor] : named) {
      auto expected = expected_file->ReadAsF32(name, allocator_);
      ASSERT_TRUE(expected.ok()) << label << ": " << expected.status();
      ASSERT_EQ(expected->shape(), tensor.shape()) << name;
      EXPECT_LE(RelativeError(tensor, *expected), kTolerance) << label << ": " << name;
    }
  }

  const std::vector<EngineOptions> modes_ = {{BackwardMode::kFull, 0, 0},
                                             {BackwardMode::kCheckpoint, 0, 0},
                                             {BackwardMode::kStream, 5, 7},
                                             {BackwardMode::kStream, 1, 1},
                                             {BackwardMode::kStream, 0, 0}};
  const std::string dir_ = GoldenDir("lora-tiny-qwen3");
  CpuAllocator allocator_;
  std::unique_ptr<CpuBackend> backend_;
  ModelConfig config_;
  ParameterStore base_, adapters_;
  nlohmann::json golden_;
};

TEST_F(LoraGoldenTest, ReadsPeftsAdapter) {
  const LoraOptions& o = *adapters_.lora();
  EXPECT_EQ(o.r, golden_["r"].get<int64_t>());
  EXPECT_EQ(o.alpha, golden_["lora_alpha"].get<double>());
  EXPECT_EQ(o.target_modules, LoraModuleNames());  // peft lists them in another order
  EXPECT_DOUBLE_EQ(o.scaling(), golden_["scaling"].get<double>());
}

TEST_F(LoraGoldenTest, SftLossLogitsAndAdapterGradientsMatchPeft) {
  auto batch = LoadSftJsonl(GoldenDir("tiny-qwen3") + "/batch.jsonl", config_.vocab_size);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const ModelTensors w = Policy();
  {
    auto expected_file = SafetensorsFile::Open(dir_ + "/logits.safetensors");
    ASSERT_TRUE(expected_file.ok());
    auto expected = expected_file->ReadAsF32("logits", allocator_);
    ASSERT_TRUE(expected.ok());
    const TokenSequence& s = (*batch)[0];
    const int64_t T = static_cast<int64_t>(s.input_ids.size());
    auto logits = Tensor::Empty(allocator_, {T, config_.vocab_size}, DType::kF32);
    std::vector<int32_t> ids = s.input_ids, targets = ShiftedTargets(s);
    CaptureLogits capture(*logits);
    Engine engine(config_, *backend_, {BackwardMode::kStream, 6, 5});
    ASSERT_TRUE(engine
                    .Forward(w, Tensor::Wrap(ids.data(), {T}, DType::kI32),
                             Tensor::Wrap(targets.data(), {T}, DType::kI32), capture)
                    .ok());
    EXPECT_LE(RelativeError(*logits, *expected), kTolerance);
  }
  const double golden_loss = golden_["sft_loss"].get<double>();
  for (const EngineOptions& options : modes_) {
    const std::string label = std::string(BackwardModeName(options.mode)) + " chunk " +
                              std::to_string(options.chunk_tokens);
    auto grads = CreateLoraStore(config_, *adapters_.lora(), allocator_, "gradients");
    ASSERT_TRUE(grads.ok());
    ModelTensors g = BindModelTensors(*grads);
    Engine engine(config_, *backend_, options);
    auto result = SftForwardBackward(engine, w, *batch, g);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_NEAR(result->loss, golden_loss, 1e-6 * golden_loss) << label;
    ExpectGradients(*grads, "sft_grads.safetensors", label);
  }
}

TEST_F(LoraGoldenTest, DpoLossAndAdapterGradientsMatchPeft) {
  DataOptions data;
  data.vocab_size = config_.vocab_size;
  auto pairs = LoadDpoJsonl(dir_ + "/dpo_pairs.jsonl", data);
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  const ModelTensors policy = Policy();
  const ModelTensors reference = BindModelTensors(base_);
  const double beta = golden_["dpo_beta"].get<double>();
  const double golden_loss = golden_["dpo_loss"].get<double>();
  for (const EngineOptions& options : modes_) {
    const std::string label = std::string(BackwardModeName(options.mode)) + " chunk " +
                              std::to_string(options.chunk_tokens);
    auto grads = CreateLoraStore(config_, *adapters_.lora(), allocator_, "gradients");
    ASSERT_TRUE(grads.ok());
    ModelTensors g = BindModelTensors(*grads);
    Engine engine(config_, *backend_, options);
    Engine reference_engine(config_, *backend_, options);
    auto result =
        DpoForwardBackward(engine, policy, reference_engine, reference, *pairs, beta, 0, g);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_NEAR(result->loss, golden_loss, 1e-6 * golden_loss) << label;
    ASSERT_EQ(result->pairs.size(), golden_["dpo_pairs"].size());
    for (size_t k = 0; k < result->pairs.size(); ++k) {
      const nlohmann::json& e = golden_["dpo_pairs"][k];
      EXPECT_NEAR(result->pairs[k].margin, e["margin"].get<double>(), 1e-6) << label;
      EXPECT_NEAR(result->pairs[k].reference_chosen, e["reference_chosen"].get<double>(), 1e-5);
    }
    ExpectGradients(*grads, "dpo_grads.safetensors", label);
  }
}

}  // namespace
}  // namespace sbp
