// stream == checkpoint == full: the three backward modes give the same loss
// and gradients (to fp32 rounding) for every chunking, architecture, GQA
// setting, tied/untied head, unequal lengths and masked labels that cross
// chunk boundaries.
#include <gtest/gtest.h>

#include "tests/worker/engine/engine_test_util.h"

namespace sbp::testing {
namespace {

constexpr double kTolerance = 1e-5;

struct ModeCase {
  std::string preset;
  int64_t kv_heads;  // 0: the preset's
  friend void PrintTo(const ModeCase& c, std::ostream* os) {
    *os << c.preset << " kv_heads=" << c.kv_heads;
  }
};

class EngineModesTest : public ::testing::TestWithParam<ModeCase> {};

TEST_P(EngineModesTest, StreamAndCheckpointEqualFull) {
  auto config = PresetConfig(GetParam().preset);
  ASSERT_TRUE(config.ok()) << config.status();
  if (GetParam().kv_heads > 0) config->num_key_value_heads = GetParam().kv_heads;
  TestModel model(*config, /*seed=*/3);
  const std::vector<TokenSequence> batch = MakeBatch(*config, {29, 13, 1, 2}, /*seed=*/5);
  const int64_t T = 29;

  auto [full, full_result] = model.Gradients(batch, {BackwardMode::kFull, 0, 0});
  EXPECT_GT(full_result.loss, 0.0);
  EXPECT_EQ(full_result.valid_targets, CountValidTargets(batch));

  auto [ckpt, ckpt_result] = model.Gradients(batch, {BackwardMode::kCheckpoint, 0, 0});
  EXPECT_NEAR(ckpt_result.loss, full_result.loss, 1e-6 * full_result.loss);
  ExpectGradientsClose(ckpt, full, kTolerance, "checkpoint");

  const std::vector<std::pair<int64_t, int64_t>> chunkings = {
      {1, 1}, {7, 5}, {64, 64}, {T - 1, T}, {T, T - 1}, {T + 5, 3}, {4, T + 9}, {0, 0}};
  for (auto [chunk, logits_chunk] : chunkings) {
    auto [stream, stream_result] =
        model.Gradients(batch, {BackwardMode::kStream, chunk, logits_chunk});
    const std::string label = "stream chunk " + std::to_string(chunk) + " logits chunk " +
                              std::to_string(logits_chunk);
    EXPECT_NEAR(stream_result.loss, full_result.loss, 1e-6 * full_result.loss) << label;
    ExpectGradientsClose(stream, full, kTolerance, label);
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, EngineModesTest,
                         ::testing::Values(ModeCase{"tiny-qwen3", 0}, ModeCase{"tiny-llama", 0},
                                           ModeCase{"tiny-qwen2", 0},
                                           ModeCase{"tiny-qwen3", 4},  // no GQA
                                           ModeCase{"tiny-llama", 1}),  // multi-query
                         [](const auto& info) {
                           std::string name = info.param.preset + "_kv" +
                                              std::to_string(info.param.kv_heads);
                           for (char& c : name) if (c == '-') c = '_';
                           return name;
                         });

TEST(EngineModes, GradientsAccumulateAcrossCalls) {
  auto config = PresetConfig("tiny-qwen3");
  TestModel model(*config, 2);
  const auto batch = MakeBatch(*config, {17, 11}, 9);
  // One call on both sequences == two calls on one each with the global count.
  auto [both, both_result] = model.Gradients(batch, {BackwardMode::kStream, 4, 4});
  auto grads = ParameterStore::Create(*config, model.allocator, "gradients");
  ASSERT_TRUE(grads.ok());
  Engine engine(*config, *model.backend, {BackwardMode::kStream, 4, 4});
  ModelTensors w = BindModelTensors(model.weights);
  ModelTensors g = BindModelTensors(*grads);
  const int64_t count = CountValidTargets(batch);
  double loss = 0;
  for (const TokenSequence& s : batch) {
    auto r = SftForwardBackward(engine, w, {s}, g, count);
    ASSERT_TRUE(r.ok());
    loss += r->loss;
  }
  EXPECT_NEAR(loss, both_result.loss, 1e-6);
  ExpectGradientsClose(*grads, both, kTolerance, "accumulated");
}

TEST(EngineModes, ForwardOnlyLossEqualsTrainingLoss) {
  auto config = PresetConfig("tiny-qwen2");
  TestModel model(*config, 4);
  const auto batch = MakeBatch(*config, {23, 8}, 1);
  auto [g, result] = model.Gradients(batch, {BackwardMode::kFull, 0, 0});
  Engine engine(*config, *model.backend, {BackwardMode::kStream, 5, 3});
  auto forward = SftForward(engine, BindModelTensors(model.weights), batch);
  ASSERT_TRUE(forward.ok());
  EXPECT_NEAR(forward->loss, result.loss, 1e-6 * result.loss);
}

}  // namespace
}  // namespace sbp::testing
