// The embedding's gradient as a row set (ModelTensors::embed_rows) against
// the dense gradient: bit-identical in every backward mode, over several
// sequences accumulating into it.
#include <gtest/gtest.h>

#include "kernels/cpu/embedding_rows.h"
#include "tests/kernels/op_test_util.h"
#include "tests/worker/engine/engine_test_util.h"

namespace sbp {
namespace {

TEST(EngineEmbeddingRows, BitIdenticalToTheDenseGradientInEveryMode) {
  auto preset = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(preset.ok());
  ModelConfig config = *preset;
  config.tie_word_embeddings = false;
  testing::TestModel model(config, 3);
  // Three sequences (ids repeat within and across them), accumulated.
  const std::vector<TokenSequence> batch = testing::MakeBatch(config, {37, 64, 5}, 7);
  for (BackwardMode mode :
       {BackwardMode::kFull, BackwardMode::kCheckpoint, BackwardMode::kStream}) {
    SCOPED_TRACE(BackwardModeName(mode));
    const EngineOptions options{mode, 16, 8};
    auto [dense, dense_result] = model.Gradients(batch, options);

    auto grads = ParameterStore::Create(config, model.allocator, "gradients");
    ASSERT_TRUE(grads.ok());
    cpu::EmbeddingRowGradient rows(model.allocator, config.vocab_size, config.hidden_size);
    ModelTensors g = BindModelTensors(*grads);
    g.embed = Tensor();
    g.embed_rows = &rows;
    Engine engine(config, *model.backend, options);
    auto result = SftForwardBackward(engine, BindModelTensors(model.weights), batch, g);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->loss, dense_result.loss);
    EXPECT_LE(rows.rows(), 37 + 64 + 5);

    Tensor embed = *grads->Find("model.embed_tokens.weight");
    EXPECT_TRUE(std::all_of(embed.data<float>(), embed.data<float>() + embed.numel(), [](float x) {
      return x == 0.0f;
    })) << "the dense buffer must stay untouched";
    rows.CopyRowsInto(embed);
    const auto got = grads->NamedTensors();
    const auto want = dense.NamedTensors();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(op_test::BitwiseEqual(got[i].second, want[i].second)) << got[i].first;
    }
  }
}

}  // namespace
}  // namespace sbp
