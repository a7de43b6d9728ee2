// The planner's optimizer offload against the allocators on the CPU: a
// backward pass and an update with the offloaded optimizer state
// (optimizer_offload.h) peak on the device where the plan says, and the
// host's peak is the plan's host_bytes — to the byte, for tied and untied
// embeddings, every backward mode and each checkpoint tier, including shapes
// whose peak is the first layer's backward (where the head's gradient buffer
// is still downloading).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/offload/checkpoint_store.h"
#include "worker/engine/parameter_store.h"
#include "worker/engine/planner.h"
#include "worker/train/job_spec.h"
#include "worker/train/optimizer_state.h"

namespace sbp {
namespace {

struct Case {
  bool tied;
  int64_t kv_heads;  // 4: K/V as wide as Q, so that long sequences peak in layer_backward
  BackwardMode mode;
  int64_t T;
  CheckpointTier tier;
};

TEST(PlannerOffload, CpuStepPeaksWhereThePlanSays) {
  const std::string dir = ::testing::TempDir() + "/planner_offload_disk";
  std::filesystem::create_directories(dir);
  int checked = 0, layer_peaks = 0;
  for (bool tied : {false, true}) {
    for (int64_t kv_heads : {2, 4}) {
      for (BackwardMode mode :
           {BackwardMode::kStream, BackwardMode::kCheckpoint, BackwardMode::kFull}) {
        for (int64_t T : {7, 300, 2000}) {
          for (CheckpointTier tier : {CheckpointTier::kDevice, CheckpointTier::kHost}) {
            // The baselines peak in the head at every length: once is enough.
            if (mode != BackwardMode::kStream && T == 2000) continue;
            const Case c{tied, kv_heads, mode, T, tier};
            SCOPED_TRACE(absl::StrCat("tied ", c.tied, " kv_heads ", c.kv_heads, " ",
                                      BackwardModeName(c.mode), " T=", c.T, " ",
                                      CheckpointTierName(c.tier)));
            auto preset = PresetConfig("tiny-qwen3");
            ASSERT_TRUE(preset.ok());
            ModelConfig config = *preset;
            config.num_hidden_layers = 4;
            config.num_key_value_heads = c.kv_heads;
            config.tie_word_embeddings = c.tied;
            CpuAllocator allocator;
            CpuBackend backend(allocator);
            auto weights = ParameterStore::Create(config, allocator, "weights");
            ASSERT_TRUE(weights.ok()) << weights.status();
            Engine engine(config, backend, {c.mode, 32, 16});
            std::unique_ptr<CheckpointStore> store;
            if (c.tier == CheckpointTier::kHost) store = NewHostCheckpointStore(backend);
            engine.set_checkpoint_store(store.get());
            OptimizerStateOptions options;
            options.weights = &*weights;
            options.initial = &*weights;
            options.separate_master = true;
            options.offload = true;
            const TrainSpec train;
            auto state = CreateOptimizerState(options, backend, train, engine);
            ASSERT_TRUE(state.ok()) << state.status();

            TokenSequence sequence;
            for (int64_t t = 0; t < c.T; ++t) {
              sequence.input_ids.push_back(
                  static_cast<int32_t>((t * 7919 + 11) % config.vocab_size));
            }
            sequence.labels = sequence.input_ids;
            allocator.ResetPeak();
            (*state)->ZeroGradients();
            const ModelTensors w = BindModelTensors(*weights);
            auto result = SftForwardBackward(engine, w, {sequence}, (*state)->grads());
            ASSERT_TRUE(result.ok()) << result.status();
            ASSERT_TRUE((*state)->FinishBackward().ok());
            ASSERT_TRUE((*state)->Update(1e-3, 1, 1.0f).ok());

            PlanRequest r;
            r.config = config;
            r.seq_len = c.T;
            r.mode = c.mode;
            r.chunk_tokens = 32;
            r.logits_chunk_tokens = 16;
            r.optimizer_offload = true;
            r.checkpoint_tier = c.tier;
            const MemoryPlan plan = *PlanMemory(r);
            EXPECT_EQ(plan.peak_bytes, allocator.peak_bytes())
                << plan.peak_phase << ": " << SummarizeBreakdown(plan, 20);
            // The host holds the optimizer (since the state was made) and the
            // host tier's inputs (since the pass).
            EXPECT_EQ(plan.host_bytes, backend.host_allocator().peak_bytes());
            ++checked;
            layer_peaks += plan.peak_phase == "layer_backward";
          }
        }
      }
    }
  }
  std::printf("%d configurations, %d of them peaking in layer_backward\n", checked, layer_peaks);
  EXPECT_GT(layer_peaks, 0);
}

}  // namespace
}  // namespace sbp
