// The embedding's gradient as a row set (kernels/cpu/embedding_rows.h) in a
// whole training step on the CPU (backward passes, global norm, AdamW from
// the rows): the allocator peaks where the planner says, to the byte, over
// several sequences per step, every backward mode and short and long
// sequences, below the dense gradient's peak by the table less the rows;
// and the step's weights equal the dense gradient's bit for bit.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/engine/planner.h"
#include "worker/train/job_spec.h"
#include "worker/train/optimizer.h"
#include "worker/train/optimizer_state.h"

namespace sbp {
namespace {

ModelConfig Config() {
  auto preset = PresetConfig("tiny-qwen3");
  CHECK_OK(preset.status());
  ModelConfig config = *preset;
  config.num_hidden_layers = 2;
  config.vocab_size = 4096;  // room for steps of up to 2,700 tokens below it
  config.tie_word_embeddings = false;
  return config;
}

std::vector<TokenSequence> Sequences(const ModelConfig& config, int64_t count, int64_t T) {
  std::vector<TokenSequence> out(count);
  for (int64_t s = 0; s < count; ++s) {
    for (int64_t t = 0; t < T; ++t) {
      // Repeats within and across sequences: fewer rows than tokens.
      out[s].input_ids.push_back(static_cast<int32_t>((t * 7919 + 13 * s + 11) % (T + 5)) %
                                 static_cast<int32_t>(config.vocab_size));
    }
    out[s].labels = out[s].input_ids;
  }
  return out;
}

struct StepResult {
  int64_t peak_bytes = 0;
  std::vector<float> weights;  // after the update
};

// One step (ZeroGradients, one pass per sequence, FinishBackward, norm,
// AdamW) from the same initial weights, with a row set of `capacity` rows
// (0: dense).
StepResult RunStep(const ModelConfig& config, BackwardMode mode, int64_t sequences, int64_t T,
                   int64_t capacity) {
  CpuAllocator allocator;
  CpuBackend backend(allocator);
  auto weights = ParameterStore::Create(config, allocator, "weights");
  CHECK_OK(weights.status());
  for (ParameterGroup& group : weights->groups()) {
    float* p = group.flat.data<float>();
    for (int64_t i = 0; i < group.padded; ++i)
      p[i] = 0.02f * static_cast<float>((i * 37) % 101 - 50) / 50;
  }
  Engine engine(config, backend, {mode, 32, 16});
  OptimizerStateOptions options;
  options.weights = &*weights;
  options.initial = &*weights;
  options.embedding_row_capacity = capacity;
  TrainSpec train;
  train.max_grad_norm = 1.0;
  auto state = CreateOptimizerState(options, backend, train, engine);
  CHECK_OK(state.status());
  const ModelTensors w = BindModelTensors(*weights);
  allocator.ResetPeak();
  (*state)->ZeroGradients();
  for (const TokenSequence& s : Sequences(config, sequences, T)) {
    CHECK_OK(SftForwardBackward(engine, w, {s}, (*state)->grads()).status());
  }
  CHECK_OK((*state)->FinishBackward());
  auto norm = (*state)->GlobalGradNorm();
  CHECK_OK(norm.status());
  CHECK_OK((*state)->Update(1e-3, 1, ClipScale(*norm, train.max_grad_norm)));
  StepResult result;
  result.peak_bytes = allocator.peak_bytes();
  for (const ParameterGroup& group : weights->groups()) {
    const float* p = group.flat.data<float>();
    result.weights.insert(result.weights.end(), p, p + group.padded);
  }
  return result;
}

TEST(PlannerEmbeddingRows, StepPeaksWhereThePlanSaysAndTrainsAsDense) {
  const ModelConfig config = Config();
  int checked = 0;
  for (BackwardMode mode :
       {BackwardMode::kStream, BackwardMode::kCheckpoint, BackwardMode::kFull}) {
    for (int64_t T : {7, 200, 900}) {
      for (int64_t sequences : {1, 3}) {
        SCOPED_TRACE(absl::StrCat(BackwardModeName(mode), " T=", T, " sequences ", sequences));
        PlanRequest r;
        r.config = config;
        r.seq_len = T;
        r.mode = mode;
        r.chunk_tokens = 32;
        r.logits_chunk_tokens = 16;
        r.embedding_row_sequences = sequences;
        const int64_t capacity = EmbeddingRowCapacity(r);
        ASSERT_EQ(capacity, sequences * T);
        const MemoryPlan plan = *PlanMemory(r);
        const StepResult rows = RunStep(config, mode, sequences, T, capacity);
        EXPECT_EQ(plan.peak_bytes, rows.peak_bytes)
            << plan.peak_phase << ": " << SummarizeBreakdown(plan, 20);
        EXPECT_GT(plan.Term("embedding_row_gradient"), 0);

        // The dense gradient's step: the same weights, bit for bit, and a
        // larger peak (the [V, H] table held from the start).
        const StepResult dense = RunStep(config, mode, sequences, T, 0);
        EXPECT_EQ(rows.weights, dense.weights);
        r.embedding_row_sequences = 0;
        EXPECT_EQ(PlanMemory(r)->peak_bytes, dense.peak_bytes);
        // No dense table at any point of the step: the peak drops by the
        // table less the rows' room (give or take the allocator's rounding).
        const int64_t saved =
            config.vocab_size * config.hidden_size * 4 - capacity * config.hidden_size * 4;
        EXPECT_NEAR(static_cast<double>(dense.peak_bytes - rows.peak_bytes),
                    static_cast<double>(saved), 256.0);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 18);
}

// Where the row set does not apply the capacity is 0 (dense): CUDA, ZeRO-2,
// optimizer offload, LoRA, tied embeddings, a step with as many tokens as
// the vocabulary, no sequence count.
TEST(PlannerEmbeddingRows, CapacityOnlyWhereTheRowSetApplies) {
  PlanRequest r;
  r.config = Config();
  r.seq_len = 100;
  r.embedding_row_sequences = 3;
  EXPECT_EQ(EmbeddingRowCapacity(r), 300);
  PlanRequest none = r;
  none.embedding_row_sequences = 0;
  EXPECT_EQ(EmbeddingRowCapacity(none), 0);
  PlanRequest whole = r;
  whole.seq_len = r.config.vocab_size;
  whole.embedding_row_sequences = 1;
  EXPECT_EQ(EmbeddingRowCapacity(whole), 0);
  whole.seq_len = r.config.vocab_size - 1;
  EXPECT_EQ(EmbeddingRowCapacity(whole), r.config.vocab_size - 1);
  PlanRequest huge = r;  // no overflow
  huge.seq_len = int64_t{1} << 26;
  huge.embedding_row_sequences = int64_t{1} << 40;
  EXPECT_EQ(EmbeddingRowCapacity(huge), 0);
  PlanRequest cuda = r;
  cuda.device = DeviceKind::kCuda;
  EXPECT_EQ(EmbeddingRowCapacity(cuda), 0);
  PlanRequest zero2 = r;
  zero2.world_size = 2;
  EXPECT_EQ(EmbeddingRowCapacity(zero2), 0);
  PlanRequest offload = r;
  offload.optimizer_offload = true;
  EXPECT_EQ(EmbeddingRowCapacity(offload), 0);
  PlanRequest lora = r;
  lora.lora.r = 4;
  lora.lora.alpha = 8;
  lora.lora.target_modules = {"q_proj"};
  EXPECT_EQ(EmbeddingRowCapacity(lora), 0);
  PlanRequest tied = r;
  tied.config.tie_word_embeddings = true;
  EXPECT_EQ(EmbeddingRowCapacity(tied), 0);
  // Where it does not apply the plan has the dense gradient.
  EXPECT_EQ(PlanMemory(tied)->Term("embedding_row_gradient"), 0);
  EXPECT_GT(PlanMemory(r)->Term("embedding_row_gradient"), 0);
  PlanRequest negative = r;
  negative.embedding_row_sequences = -1;
  EXPECT_EQ(PlanMemory(negative).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sbp
