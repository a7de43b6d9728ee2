// Per-token log-probs and the weighted log-prob loss: agree with the engine's
// cross-entropy (values and gradients), are chunk-independent, and report
// scratch allocation failures.
#include "worker/train/objectives/sequence_logprobs.h"

#include <gtest/gtest.h>

#include "tests/worker/train/objectives/objectives_test_util.h"

namespace sbp::objectives_testing {
namespace {

TEST(SequenceLogProbs, MatchCrossEntropyAndChunking) {
  TestModel model(*PresetConfig("tiny-qwen3"), 3);
  const std::vector<TokenSequence> batch = testing::MakeBatch(model.config, {13, 7}, 4);
  ModelTensors w = BindModelTensors(model.weights);
  Engine full(model.config, *model.backend, {BackwardMode::kFull, 0, 0});
  Engine stream(model.config, *model.backend, {BackwardMode::kStream, 3, 2});
  for (const TokenSequence& s : batch) {
    auto a = TokenLogProbs(full, w, s);
    auto b = TokenLogProbs(stream, w, s);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->size(), s.input_ids.size());
    const std::vector<int32_t> targets = ShiftedTargets(s);
    for (size_t t = 0; t < a->size(); ++t) {
      if (targets[t] == kIgnoreIndex) {
        EXPECT_EQ((*a)[t], 0.0f);
      } else {
        EXPECT_LT((*a)[t], 0.0f);
      }
      EXPECT_NEAR((*a)[t], (*b)[t], 1e-5) << t;
    }
    // sum of log-probs == -(summed cross-entropy).
    auto ce = SftForward(full, w, {s}, /*normaliser=*/1);
    auto sum = SequenceLogProb(stream, w, s);
    ASSERT_TRUE(ce.ok() && sum.ok());
    EXPECT_NEAR(*sum, -ce->loss, 1e-5 * ce->loss);
  }
}

TEST(SequenceLogProbs, WeightedLossWithMinusOneOverCountIsCrossEntropy) {
  TestModel model(*PresetConfig("tiny-qwen2"), 2);
  const std::vector<TokenSequence> batch = testing::MakeBatch(model.config, {17, 9}, 6);
  const EngineOptions options{BackwardMode::kStream, 3, 2};
  auto [sft, sft_result] = model.Gradients(batch, options);

  ParameterStore grads = NewStore(model, "gradients");
  ModelTensors g = BindModelTensors(grads);
  Engine engine(model.config, *model.backend, options);
  const double count = static_cast<double>(CountValidTargets(batch));
  double loss = 0;
  for (const TokenSequence& s : batch) {
    std::vector<float> c(s.input_ids.size(), static_cast<float>(-1.0 / count));
    std::vector<float> recorded;
    WeightedLogProbLoss weighted(std::move(c), &recorded);
    auto r = RunTokenLoss(engine, BindModelTensors(model.weights), s, weighted, &g);
    ASSERT_TRUE(r.ok()) << r.status();
    loss += *r;
    EXPECT_EQ(recorded.size(), s.input_ids.size());
  }
  EXPECT_NEAR(loss, sft_result.loss, 1e-6 * sft_result.loss);
  ExpectGradientsClose(grads, sft, 1e-5, "weighted log-prob vs cross-entropy");
}

TEST(SequenceLogProbs, ScratchAllocationFailureIsReported) {
  CpuAllocator allocator;
  CpuBackend backend(allocator);
  std::vector<float> logits_data(4 * 8, 0.5f);
  std::vector<int32_t> targets_data = {1, kIgnoreIndex, 3, 7};
  Tensor logits = Tensor::Wrap(logits_data.data(), {4, 8}, DType::kF32);
  Tensor targets = Tensor::Wrap(targets_data.data(), {4}, DType::kI32);
  std::vector<float> recorded;
  LogProbRecorder recorder(4, &recorded);
  allocator.set_budget_bytes(1);
  EXPECT_EQ(recorder.Forward(backend, logits, targets, 0), 0.0);
  EXPECT_EQ(recorder.status().code(), absl::StatusCode::kResourceExhausted);

  allocator.set_budget_bytes(0);
  LogProbRecorder ok_recorder(4, &recorded);
  const double sum = ok_recorder.Forward(backend, logits, targets, 0);
  ASSERT_TRUE(ok_recorder.status().ok());
  // Uniform logits: log(1/8) on the three valid rows.
  EXPECT_NEAR(sum, 3 * std::log(1.0 / 8.0), 1e-6);
  EXPECT_EQ(recorded[1], 0.0f);
}

}  // namespace
}  // namespace sbp::objectives_testing
