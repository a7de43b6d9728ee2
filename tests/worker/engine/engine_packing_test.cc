// Packed sequences are exact: the loss and gradients of documents d1..dk
// packed into one sequence (worker/train/packing.h) equal those of the k
// separate sequences (the batch mean is the sum of their contributions over
// the shared count of valid targets), to fp32 rounding, in every backward
// mode and chunking, with chunk boundaries inside documents, for all three
// architectures (Qwen3 q/k norms, Llama, Qwen2 biases) and GQA.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/worker/engine/engine_test_util.h"
#include "worker/train/packing.h"

namespace sbp::testing {
namespace {

const std::vector<EngineOptions>& Modes() {
  static const auto* modes = new std::vector<EngineOptions>{
      {BackwardMode::kFull, 0, 0},    {BackwardMode::kCheckpoint, 0, 0},
      {BackwardMode::kStream, 7, 5},  {BackwardMode::kStream, 1, 1},
      {BackwardMode::kStream, 16, 3}, {BackwardMode::kStream, 300, 64}};
  return *modes;
}

std::string Label(const EngineOptions& o) {
  return std::string(BackwardModeName(o.mode)) + " chunk " + std::to_string(o.chunk_tokens) +
         " logits chunk " + std::to_string(o.logits_chunk_tokens);
}

TEST(EnginePackingTest, PackedDocumentsEqualSeparateSequencesInEveryMode) {
  for (const char* preset : {"tiny-qwen3", "tiny-llama", "tiny-qwen2"}) {
    SCOPED_TRACE(preset);
    auto config = PresetConfig(preset);
    ASSERT_TRUE(config.ok());
    TestModel model(*config, /*seed=*/3);
    const std::vector<TokenSequence> docs = MakeBatch(*config, {29, 13, 1, 2, 40, 9}, 5);
    auto [reference, ref_result] = model.Gradients(docs, {BackwardMode::kFull, 0, 0});
    // One sequence of all six documents, and three sequences of at most 45 tokens.
    for (int64_t seq_len : {int64_t{94}, int64_t{45}}) {
      const std::vector<TokenSequence> packed = PackSequences(docs, seq_len);
      ASSERT_EQ(packed.size(), seq_len == 94 ? 1u : 3u);
      EXPECT_EQ(CountValidTargets(packed), CountValidTargets(docs));
      for (const EngineOptions& options : Modes()) {
        const std::string label = Label(options) + " seq_len " + std::to_string(seq_len);
        auto [grads, result] = model.Gradients(packed, options);
        EXPECT_EQ(result.valid_targets, ref_result.valid_targets) << label;
        EXPECT_NEAR(result.loss, ref_result.loss, 1e-5 * ref_result.loss) << label;
        ExpectGradientsClose(grads, reference, 1e-4, label);
      }
    }
  }
}

// Without document offsets the same tokens attend across documents: the
// test above would fail if the offsets were ignored.
TEST(EnginePackingTest, DocumentBoundariesChangeTheResult) {
  auto config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  TestModel model(*config, /*seed=*/3);
  const std::vector<TokenSequence> docs = MakeBatch(*config, {29, 13, 40}, 5);
  std::vector<TokenSequence> packed = PackSequences(docs, 82);
  auto [with_docs, r1] = model.Gradients(packed, {BackwardMode::kStream, 16, 16});
  packed[0].doc_offsets.clear();
  auto [without, r2] = model.Gradients(packed, {BackwardMode::kStream, 16, 16});
  EXPECT_GT(std::abs(r1.loss - r2.loss), 1e-4 * r1.loss);
}

TEST(EnginePackingTest, ChunkedForwardOfPackedDocumentsEqualsSeparateForward) {
  auto config = PresetConfig("tiny-llama");
  ASSERT_TRUE(config.ok());
  TestModel model(*config, /*seed=*/4);
  const std::vector<TokenSequence> docs = MakeBatch(*config, {17, 30, 5}, 9);
  const std::vector<TokenSequence> packed = PackSequences(docs, 64);
  Engine separate(model.config, *model.backend, {BackwardMode::kStream, 0, 0});
  Engine chunked(model.config, *model.backend, {BackwardMode::kStream, 6, 11});
  const ModelTensors w = BindModelTensors(model.weights);
  auto want = SftForward(separate, w, docs);
  auto got = SftForward(chunked, w, packed);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_NEAR(got->loss, want->loss, 1e-5 * want->loss);
}

}  // namespace
}  // namespace sbp::testing
