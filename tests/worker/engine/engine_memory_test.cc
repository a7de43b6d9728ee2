// StreamBP's memory claim at engine level: for a long sequence, the peak of a
// training step is ordered stream < checkpoint < full, and StreamBP's
// activation memory stays near O(T * hidden) while the baselines grow with
// T * vocab (logits) and with every layer's intermediates.
#include <gtest/gtest.h>

#include "tests/worker/engine/engine_test_util.h"

namespace sbp::testing {
namespace {

int64_t StepPeak(TestModel& model, const std::vector<TokenSequence>& batch,
                 EngineOptions options) {
  ScopedPeakReset phase(model.allocator);
  model.Gradients(batch, options);
  return phase.phase_peak_bytes() - phase.start_bytes();
}

TEST(EngineMemory, StreamUsesLessThanCheckpointLessThanFull) {
  auto config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  config->vocab_size = 4096;  // make the logits matter, as with real vocabularies
  TestModel model(*config, 1);
  const int T = 512;
  const auto batch = MakeBatch(*config, {T}, 3);
  const int64_t full = StepPeak(model, batch, {BackwardMode::kFull, 0, 0});
  const int64_t checkpoint = StepPeak(model, batch, {BackwardMode::kCheckpoint, 0, 0});
  const int64_t stream = StepPeak(model, batch, {BackwardMode::kStream, 64, 64});
  EXPECT_LT(checkpoint, full);
  EXPECT_LT(stream, checkpoint);
  // Logits and their gradient alone are 2 * T * V * 4 bytes in the baseline.
  const int64_t logits_bytes = int64_t{2} * T * config->vocab_size * 4;
  EXPECT_GE(checkpoint - stream, logits_bytes / 2);
  // StreamBP: a few T x H buffers per layer, never T x V.
  const int64_t gradients = ParameterStore::Create(*config, model.allocator, "g")->total_bytes();
  const int64_t hidden_row = int64_t{T} * config->hidden_size * 4;
  EXPECT_LT(stream - gradients, (config->num_hidden_layers + 8) * hidden_row + logits_bytes / 8);
}

}  // namespace
}  // namespace sbp::testing
