// The engine against Hugging Face transformers: loss, logits and every
// parameter gradient of the tiny presets, computed by the real
// Qwen3ForCausalLM / LlamaForCausalLM / Qwen2ForCausalLM classes in float64
// (tests/reference/generate_goldens.py) and committed as small files. Two
// of them scale RoPE (llama3, yarn) and run past their original context.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "tests/reference/golden_files.h"
#include "tests/worker/engine/engine_test_util.h"
#include "worker/model/safetensors.h"
#include "worker/train/jsonl_data.h"

namespace sbp::testing {
namespace {

constexpr double kTolerance = 1e-5;

using golden::CaptureLogits;
using golden::GoldenDir;
using golden::ReadJson;

class HfGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGoldenTest, LossLogitsAndGradientsMatchTransformers) {
  const std::string dir = GoldenDir(GetParam());
  CpuAllocator allocator;
  CpuBackend backend(allocator);
  auto loaded = LoadModelDirectory(dir, allocator);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const ModelConfig config = loaded->config;
  auto batch = LoadSftJsonl(dir + "/batch.jsonl", config.vocab_size);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const nlohmann::json golden = ReadJson(dir + "/golden.json");
  ASSERT_EQ(CountValidTargets(*batch), golden["valid_targets"].get<int64_t>());

  auto weights = ParameterStore::FromWeights(*loaded, allocator, "weights");
  ASSERT_TRUE(weights.ok()) << weights.status();
  const ModelTensors w = BindModelTensors(*weights);

  auto golden_grads = SafetensorsFile::Open(dir + "/grads.safetensors");
  ASSERT_TRUE(golden_grads.ok()) << golden_grads.status();
  const double golden_loss = golden["loss"].get<double>();

  // Logits of the first sequence.
  {
    auto expected = SafetensorsFile::Open(dir + "/logits.safetensors");
    ASSERT_TRUE(expected.ok());
    auto expected_logits = expected->ReadAsF32("logits", allocator);
    ASSERT_TRUE(expected_logits.ok());
    const TokenSequence& s = (*batch)[0];
    const int64_t T = static_cast<int64_t>(s.input_ids.size());
    auto logits = Tensor::Empty(allocator, {T, config.vocab_size}, DType::kF32);
    std::vector<int32_t> ids = s.input_ids, targets = ShiftedTargets(s);
    CaptureLogits capture(*logits);
    Engine engine(config, backend, {BackwardMode::kStream, 6, 5});
    ASSERT_TRUE(engine
                    .Forward(w, Tensor::Wrap(ids.data(), {T}, DType::kI32),
                             Tensor::Wrap(targets.data(), {T}, DType::kI32), capture)
                    .ok());
    EXPECT_LE(RelativeError(*logits, *expected_logits), kTolerance);
  }

  const std::vector<EngineOptions> modes = {{BackwardMode::kFull, 0, 0},
                                            {BackwardMode::kCheckpoint, 0, 0},
                                            {BackwardMode::kStream, 5, 7},
                                            {BackwardMode::kStream, 1, 1},
                                            {BackwardMode::kStream, 0, 0}};
  for (const EngineOptions& options : modes) {
    const std::string label = std::string(BackwardModeName(options.mode)) + " chunk " +
                              std::to_string(options.chunk_tokens);
    auto grads = ParameterStore::Create(config, allocator, "gradients");
    ASSERT_TRUE(grads.ok());
    ModelTensors g = BindModelTensors(*grads);
    Engine engine(config, backend, options);
    auto result = SftForwardBackward(engine, w, *batch, g);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_NEAR(result->loss, golden_loss, 1e-6 * golden_loss) << label;
    for (const auto& [name, tensor] : grads->NamedTensors()) {
      auto expected = golden_grads->ReadAsF32(name, allocator);
      ASSERT_TRUE(expected.ok()) << label << ": " << expected.status();
      ASSERT_EQ(expected->shape(), tensor.shape()) << name;
      EXPECT_LE(RelativeError(tensor, *expected), kTolerance) << label << ": " << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, HfGoldenTest,
                         ::testing::Values("tiny-qwen3", "tiny-llama", "tiny-qwen2",
                                           // scaled RoPE, positions beyond the original context
                                           "tiny-llama3-rope", "tiny-qwen3-yarn"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace sbp::testing
