// The planner's rollout phase (online GRPO) against the allocator: the KV
// caches and the decode working set of a Generate call over B completions
// are what the plan says, at most, and most of it (the plan holds
// seq_len-row caches where a call holds prompt + max_new_tokens - 1 rows).
#include <gtest/gtest.h>

#include "kernels/allocator.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/reference/golden_files.h"
#include "worker/engine/decode/generation.h"
#include "worker/engine/parameter_store.h"
#include "worker/engine/planner.h"
#include "worker/model/model_io.h"

namespace sbp {
namespace {

TEST(DecodeMemoryTest, TheRolloutPhaseOfThePlanHoldsWhatGenerateAllocates) {
  for (const char* preset : {"tiny-qwen3", "tiny-llama"}) {
    CpuAllocator allocator;
    CpuBackend backend(allocator);
    auto loaded = LoadModelDirectory(golden::GoldenDir(preset), allocator);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const ModelConfig config = loaded->config;
    auto store = ParameterStore::FromWeights(*loaded, allocator, "weights");
    ASSERT_TRUE(store.ok());
    *loaded = ModelWeights();
    const ModelTensors weights = BindModelTensors(*store);
    constexpr int64_t kSequences = 12, kPrompt = 10, kNew = 7, kSeqLen = kPrompt + kNew;
    std::vector<GenerationRequest> requests;
    for (int64_t i = 0; i < kSequences; ++i) {
      std::vector<int32_t> prompt(kPrompt);
      for (int64_t t = 0; t < kPrompt; ++t) prompt[t] = static_cast<int32_t>((7 * i + 3 * t) % 200);
      requests.push_back({prompt, SamplerStream(1, 0, static_cast<uint64_t>(i))});
    }
    GenerationOptions options;
    options.max_new_tokens = kNew;
    Decoder decoder(config, backend, 4);
    const int64_t before = allocator.current_bytes();
    allocator.ResetPeak();
    auto generated = Generate(decoder, weights, std::move(requests), options);
    ASSERT_TRUE(generated.ok()) << generated.status();
    const int64_t measured = allocator.peak_bytes() - before;

    PlanRequest request;
    request.config = config;
    request.seq_len = kSeqLen;
    request.chunk_tokens = 4;
    request.logits_chunk_tokens = 4;
    request.objective = PlanObjective::kGrpo;
    request.reference_model = false;
    request.rollout_sequences = kSequences;
    request.rollout_prompt_tokens = kPrompt;
    auto plan = PlanMemory(request);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->peak_phase, "rollout") << preset;
    const int64_t planned = plan->peak_bytes - plan->model_state_bytes;
    EXPECT_LE(measured, planned) << preset;
    EXPECT_GE(measured, planned * 85 / 100) << preset << ": " << measured << " of " << planned;
    bool named = false;
    for (const MemoryTerm& t : plan->breakdown) named |= t.name == "kv_cache";
    EXPECT_TRUE(named);
  }
}

}  // namespace
}  // namespace sbp
