// LoRA in the engine. A LoRA model is the base model with merged weights
// W' = W + s B A, so (with G the full gradient at W')
//
//   loss_lora = loss_full(W'),  dB = s G A^T,  dA = s B^T G,
//
// which checks the adapters' forward and backward against the engine's
// already-tested full gradients. Then stream == checkpoint == full for the
// adapter gradients, in every chunking, on every architecture.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/worker/engine/engine_test_util.h"
#include "worker/engine/lora_store.h"

namespace sbp::testing {
namespace {

constexpr double kTolerance = 1e-5;

LoraOptions AllModules(int64_t r, double alpha) {
  LoraOptions o;
  o.r = r;
  o.alpha = alpha;
  o.target_modules = LoraModuleNames();
  o.init_seed = 7;
  return o;
}

// Adapters with PEFT's initialisation, then B random too (B = 0 would make
// dA zero and the test blind to it).
ParameterStore MakeAdapters(const ModelConfig& config, const LoraOptions& options,
                            Allocator& allocator, uint64_t seed) {
  auto store = CreateLoraStore(config, options, allocator, "adapters");
  CHECK_OK(store.status());
  InitLoraWeights(*store);
  uint64_t i = 0;
  for (auto& [name, tensor] : store->NamedTensors()) {
    Tensor t = tensor;
    if (name.find(".lora_B.") != std::string::npos) FillNormal(t, seed + i, 0.0f, 0.1f);
    ++i;
  }
  return *std::move(store);
}

// The base weight a PEFT adapter key belongs to.
std::string BaseName(const std::string& adapter_key) {
  std::string name = adapter_key.substr(std::string("base_model.model.").size());
  const size_t at = name.find(".lora_");
  return name.substr(0, at) + ".weight";
}

// out[i, j] (+)= scale * sum_k x[i, k] y[k, j] over host f32 tensors, in double.
void HostMatmul(const Tensor& x, const Tensor& y, double scale, Tensor& out, bool accumulate) {
  const int64_t n = x.dim(0), k = x.dim(1), m = y.dim(1);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += double{x.data<float>()[i * k + p]} * y.data<float>()[p * m + j];
      float& o = out.data<float>()[i * m + j];
      o = static_cast<float>((accumulate ? o : 0.0) + scale * sum);
    }
  }
}

Tensor HostTranspose(const Tensor& t, Allocator& allocator) {
  auto out = Tensor::Empty(allocator, {t.dim(1), t.dim(0)}, DType::kF32, "transpose");
  CHECK_OK(out.status());
  for (int64_t i = 0; i < t.dim(0); ++i) {
    for (int64_t j = 0; j < t.dim(1); ++j)
      out->data<float>()[j * t.dim(0) + i] = t.data<float>()[i * t.dim(1) + j];
  }
  return *out;
}

struct LoraRun {
  ParameterStore grads;
  BatchResult result;
};

LoraRun LoraGradients(TestModel& model, const ParameterStore& adapters,
                      const std::vector<TokenSequence>& batch, EngineOptions options) {
  auto grads = CreateLoraStore(model.config, *adapters.lora(), model.allocator, "adapter grads");
  CHECK_OK(grads.status());
  Engine engine(model.config, *model.backend, options);
  ModelTensors w = BindModelTensors(model.weights);
  AttachAdapters(adapters, w);
  ModelTensors g = BindModelTensors(*grads);
  auto result = SftForwardBackward(engine, w, batch, g);
  CHECK_OK(result.status());
  return {*std::move(grads), *result};
}

class LoraEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraEngineTest, AdapterGradientsEqualProjectedFullGradients) {
  auto config = PresetConfig(GetParam());
  ASSERT_TRUE(config.ok()) << config.status();
  TestModel model(*config, /*seed=*/3);
  const LoraOptions options = AllModules(4, 8.0);
  const double s = options.scaling();
  ParameterStore adapters = MakeAdapters(*config, options, model.allocator, 11);
  const auto batch = MakeBatch(*config, {19, 7}, /*seed=*/5);
  LoraRun lora = LoraGradients(model, adapters, batch, {BackwardMode::kFull, 0, 0});

  // The merged model W' = W + s B A and its full gradient G.
  TestModel merged(*config, 3);
  const auto named = adapters.NamedTensors();
  for (size_t i = 0; i < named.size(); i += 2) {
    const Tensor& a = named[i].second;
    const Tensor& b = named[i + 1].second;
    auto w = merged.weights.Find(BaseName(named[i].first));
    ASSERT_TRUE(w.ok()) << w.status();
    Tensor wt = *w;
    HostMatmul(b, a, s, wt, /*accumulate=*/true);
  }
  auto [full, full_result] = merged.Gradients(batch, {BackwardMode::kFull, 0, 0});
  EXPECT_NEAR(lora.result.loss, full_result.loss, 1e-6 * full_result.loss);

  CpuAllocator host;
  const auto grads = lora.grads.NamedTensors();
  for (size_t i = 0; i < named.size(); i += 2) {
    const Tensor& a = named[i].second;
    const Tensor& b = named[i + 1].second;
    auto g = full.Find(BaseName(named[i].first));
    ASSERT_TRUE(g.ok());
    // dB = s G A^T, dA = s B^T G.
    auto expected_b = Tensor::Empty(host, b.shape(), DType::kF32, "dB");
    auto expected_a = Tensor::Empty(host, a.shape(), DType::kF32, "dA");
    HostMatmul(*g, HostTranspose(a, host), s, *expected_b, false);
    HostMatmul(HostTranspose(b, host), *g, s, *expected_a, false);
    EXPECT_LE(RelativeError(grads[i].second, *expected_a), kTolerance) << grads[i].first;
    EXPECT_LE(RelativeError(grads[i + 1].second, *expected_b), kTolerance) << grads[i + 1].first;
    EXPECT_GT(cpu::SumSquares(*expected_a), 0.0) << grads[i].first;
  }
}

TEST_P(LoraEngineTest, StreamAndCheckpointEqualFull) {
  auto config = PresetConfig(GetParam());
  ASSERT_TRUE(config.ok()) << config.status();
  TestModel model(*config, /*seed=*/3);
  ParameterStore adapters = MakeAdapters(*config, AllModules(4, 8.0), model.allocator, 13);
  const std::vector<TokenSequence> batch = MakeBatch(*config, {29, 13, 1, 2}, /*seed=*/5);
  const int64_t T = 29;
  LoraRun full = LoraGradients(model, adapters, batch, {BackwardMode::kFull, 0, 0});
  EXPECT_GT(full.result.loss, 0.0);
  LoraRun ckpt = LoraGradients(model, adapters, batch, {BackwardMode::kCheckpoint, 0, 0});
  EXPECT_NEAR(ckpt.result.loss, full.result.loss, 1e-6 * full.result.loss);
  ExpectGradientsClose(ckpt.grads, full.grads, kTolerance, "checkpoint");
  const std::vector<std::pair<int64_t, int64_t>> chunkings = {{1, 1},     {7, 5},     {T - 1, T},
                                                              {T + 5, 3}, {4, T + 9}, {0, 0}};
  for (auto [chunk, logits_chunk] : chunkings) {
    LoraRun stream =
        LoraGradients(model, adapters, batch, {BackwardMode::kStream, chunk, logits_chunk});
    const std::string label =
        "stream chunk " + std::to_string(chunk) + " logits chunk " + std::to_string(logits_chunk);
    EXPECT_NEAR(stream.result.loss, full.result.loss, 1e-6 * full.result.loss) << label;
    ExpectGradientsClose(stream.grads, full.grads, kTolerance, label);
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, LoraEngineTest,
                         ::testing::Values("tiny-qwen3", "tiny-llama", "tiny-qwen2"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST(LoraEngine, FreshAdaptersLeaveTheModelUnchanged) {
  auto config = PresetConfig("tiny-qwen3");
  TestModel model(*config, 2);
  LoraOptions options = AllModules(8, 16.0);
  options.rslora = true;
  auto adapters = CreateLoraStore(*config, options, model.allocator, "adapters");
  ASSERT_TRUE(adapters.ok());
  InitLoraWeights(*adapters);
  const auto batch = MakeBatch(*config, {15}, 3);
  LoraRun lora = LoraGradients(model, *adapters, batch, {BackwardMode::kStream, 4, 4});
  auto [full, full_result] = model.Gradients(batch, {BackwardMode::kStream, 4, 4});
  EXPECT_NEAR(lora.result.loss, full_result.loss, 1e-7 * full_result.loss);
  // B = 0: dA = 0, dB != 0.
  for (auto& [name, g] : lora.grads.NamedTensors()) {
    if (name.find("lora_A") != std::string::npos) {
      EXPECT_EQ(cpu::SumSquares(g), 0.0) << name;
    } else {
      EXPECT_GT(cpu::SumSquares(g), 0.0) << name;
    }
  }
}

TEST(LoraEngine, SomeModulesOnly) {
  auto config = PresetConfig("tiny-llama");
  TestModel model(*config, 2);
  LoraOptions options = AllModules(2, 4.0);
  options.target_modules = {"q_proj", "v_proj", "down_proj"};
  ParameterStore adapters = MakeAdapters(*config, options, model.allocator, 5);
  EXPECT_EQ(adapters.NamedTensors().size(), 6u * config->num_hidden_layers);
  const auto batch = MakeBatch(*config, {21, 9}, 4);
  LoraRun full = LoraGradients(model, adapters, batch, {BackwardMode::kFull, 0, 0});
  LoraRun stream = LoraGradients(model, adapters, batch, {BackwardMode::kStream, 5, 3});
  EXPECT_NEAR(stream.result.loss, full.result.loss, 1e-6 * full.result.loss);
  ExpectGradientsClose(stream.grads, full.grads, kTolerance, "stream");
}

TEST(LoraEngine, InitIsDeterministicAndKaimingUniform) {
  auto config = PresetConfig("tiny-qwen3");
  CpuAllocator allocator;
  const LoraOptions options = AllModules(4, 8.0);
  auto one = CreateLoraStore(*config, options, allocator, "a");
  auto two = CreateLoraStore(*config, options, allocator, "b");
  ASSERT_TRUE(one.ok() && two.ok());
  InitLoraWeights(*one);
  InitLoraWeights(*two);
  const auto a = one->NamedTensors(), b = two->NamedTensors();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a[0].first, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(a[13].first, "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight");
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(RelativeError(a[i].second, b[i].second), 0.0) << a[i].first;
    if (i % 2 == 0) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(a[i].second.dim(1)));
      for (int64_t k = 0; k < a[i].second.numel(); ++k) {
        EXPECT_LE(std::abs(a[i].second.data<float>()[k]), bound);
      }
    } else {
      EXPECT_EQ(cpu::SumSquares(a[i].second), 0.0);
    }
  }
  // Another seed, other values.
  LoraOptions other = options;
  other.init_seed = 8;
  auto three = CreateLoraStore(*config, other, allocator, "c");
  InitLoraWeights(*three);
  EXPECT_GT(RelativeError(three->NamedTensors()[0].second, a[0].second), 0.1);
}

TEST(LoraEngine, FlopsLeaveOutTheFrozenWeightGradients) {
  auto config = PresetConfig("tiny-qwen3");
  CpuAllocator allocator;
  auto base = ParameterStore::Create(*config, allocator, "base");
  auto adapters = CreateLoraStore(*config, AllModules(4, 8), allocator, "adapters");
  ASSERT_TRUE(base.ok() && adapters.ok());
  ModelTensors w = BindModelTensors(*base);
  EXPECT_EQ(LoraTrainingFlops(*config, w, 100), TrainingFlops(*config, 100));
  AttachAdapters(*adapters, w);
  int64_t adapter_params = 0;
  for (auto& [name, t] : adapters->NamedTensors()) adapter_params += t.numel();
  EXPECT_EQ(AdapterParameterCount(w), adapter_params);
  // Matmul parameters: every projection and the (untied) LM head.
  const ModelConfig& c = *config;
  const double matmul =
      c.num_hidden_layers * (2.0 * c.hidden_size * c.q_dim() + 2.0 * c.hidden_size * c.kv_dim() +
                             3.0 * c.hidden_size * c.intermediate_size) +
      double(c.vocab_size) * c.hidden_size;
  EXPECT_DOUBLE_EQ(LoraTrainingFlops(c, w, 100),
                   TrainingFlops(c, 100) - 100 * (2 * matmul - 6.0 * adapter_params));
}

TEST(LoraEngine, OptionsAreValidated) {
  LoraOptions o = AllModules(4, 8);
  EXPECT_TRUE(ValidateLoraOptions(o).ok());
  o.target_modules = {"q_proj", "qkv_proj", "lm_head"};
  const absl::Status unknown = ValidateLoraOptions(o);
  EXPECT_NE(unknown.message().find("qkv_proj, lm_head"), std::string::npos) << unknown;
  o = AllModules(4, 8);
  o.dropout = 0.05;
  EXPECT_NE(ValidateLoraOptions(o).message().find("lora.dropout"), std::string::npos);
  o = AllModules(0, 8);
  EXPECT_FALSE(ValidateLoraOptions(o).ok());
  EXPECT_DOUBLE_EQ(AllModules(16, 32).scaling(), 2.0);
  LoraOptions rs = AllModules(16, 32);
  rs.rslora = true;
  EXPECT_DOUBLE_EQ(rs.scaling(), 8.0);
}

}  // namespace
}  // namespace sbp::testing
