// The local optimizer state with the embedding's gradient as a row set
// (OptimizerStateOptions::embedding_row_capacity) against the dense gradient:
// the same norms and weights bit for bit over steps of several micro-batches,
// with and without separate masters, and a lower peak during the backward.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/random.h"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/train/job_spec.h"
#include "worker/train/optimizer.h"
#include "worker/train/optimizer_state.h"

namespace sbp {
namespace {

struct TrainRun {
  std::vector<double> norms;
  std::vector<float> weights;  // every group, concatenated
  int64_t backward_peak = 0;   // the largest allocator peak over the backward passes
  int64_t step_peak = 0;       // ... over whole steps
};

std::vector<TokenSequence> MicroBatch(const ModelConfig& config, int step, int micro) {
  TokenSequence s;
  const int n = 40 + 13 * micro;
  s.input_ids.resize(n);
  Tensor ids = Tensor::Wrap(s.input_ids.data(), {n}, DType::kI32);
  // A small id range: rows repeat within and across micro-batches.
  FillIntegers(ids, 100 * step + micro, 0, static_cast<int32_t>(config.vocab_size / 4));
  s.labels = s.input_ids;
  s.labels[0] = -100;
  return {s};
}

TrainRun Train(const ModelConfig& config, bool embedding_rows, bool separate_master) {
  CpuAllocator allocator;
  CpuBackend backend(allocator);
  auto initial = InitModelWeights(config, 5, allocator);
  CHECK_OK(initial.status());
  auto weights = ParameterStore::FromWeights(*initial, allocator, "weights");
  CHECK_OK(weights.status());
  Engine engine(config, backend, {BackwardMode::kStream, 16, 8});
  OptimizerStateOptions options;
  options.weights = &*weights;
  options.initial = &*weights;
  options.separate_master = separate_master;
  // Room for the step's 40 + 53 + 66 tokens.
  options.embedding_row_capacity = embedding_rows ? 159 : 0;
  TrainSpec train;
  train.weight_decay = 0.1;
  train.max_grad_norm = 0.5;
  auto state = CreateOptimizerState(options, backend, train, engine);
  CHECK_OK(state.status());
  const ModelTensors w = BindModelTensors(*weights);
  TrainRun run;
  for (int step = 1; step <= 3; ++step) {
    allocator.ResetPeak();
    (*state)->ZeroGradients();
    for (int micro = 0; micro < 3; ++micro) {
      auto result = SftForwardBackward(engine, w, MicroBatch(config, step, micro),
                                       (*state)->grads(), /*normaliser=*/100);
      CHECK_OK(result.status());
    }
    run.backward_peak = std::max(run.backward_peak, allocator.peak_bytes());
    CHECK_OK((*state)->FinishBackward());
    auto norm = (*state)->GlobalGradNorm();
    CHECK_OK(norm.status());
    run.norms.push_back(*norm);
    CHECK_OK((*state)->Update(1e-2, step, ClipScale(*norm, train.max_grad_norm)));
    run.step_peak = std::max(run.step_peak, allocator.peak_bytes());
  }
  for (const ParameterGroup& g : weights->groups()) {
    const float* p = g.flat.data<float>();
    run.weights.insert(run.weights.end(), p, p + g.numel);
  }
  return run;
}

TEST(OptimizerEmbeddingRows, SameUpdatesBitForBitAndALowerBackwardPeak) {
  auto preset = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(preset.ok());
  ModelConfig config = *preset;
  config.tie_word_embeddings = false;
  config.num_hidden_layers = 2;
  const int64_t dense_bytes = config.vocab_size * config.hidden_size * 4;
  for (bool separate_master : {false, true}) {
    SCOPED_TRACE(separate_master ? "separate masters" : "shared masters");
    const TrainRun dense = Train(config, false, separate_master);
    const TrainRun rows = Train(config, true, separate_master);
    EXPECT_EQ(rows.norms, dense.norms);
    ASSERT_EQ(rows.weights.size(), dense.weights.size());
    EXPECT_EQ(
        std::memcmp(rows.weights.data(), dense.weights.data(), rows.weights.size() * sizeof(float)),
        0);
    // The backward holds at most 40 + 53 + 66 rows instead of V.
    EXPECT_LE(rows.backward_peak, dense.backward_peak - dense_bytes + 159 * config.hidden_size * 4);
    EXPECT_LE(rows.step_peak, dense.step_peak);
  }
}

TEST(OptimizerEmbeddingRows, TiedEmbeddingsStayDense) {
  auto preset = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(preset.ok());
  ModelConfig config = *preset;
  config.tie_word_embeddings = true;
  config.num_hidden_layers = 1;
  CpuAllocator allocator;
  CpuBackend backend(allocator);
  auto weights = ParameterStore::Create(config, allocator, "weights");
  ASSERT_TRUE(weights.ok());
  Engine engine(config, backend, {BackwardMode::kStream, 16, 8});
  OptimizerStateOptions options;
  options.weights = &*weights;
  options.initial = &*weights;
  options.embedding_row_capacity = 100;  // ignored: the table is also the head
  auto state = CreateOptimizerState(options, backend, TrainSpec(), engine);
  ASSERT_TRUE(state.ok());
  EXPECT_TRUE((*state)->grads().embed.defined());
  EXPECT_EQ((*state)->grads().embed_rows, nullptr);
}

}  // namespace
}  // namespace sbp
