// The memory planner for LoRA jobs against the allocator: a frozen base,
// adapters with their f32 gradients and AdamW moments held as the trainer
// holds them, and one training step on the real CPU kernels; the predicted
// peak equals the allocator's measured peak, in every mode, for several
// ranks and module sets, for SFT and with a DPO reference model.
#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/cpu/cpu_backend.h"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/lora_store.h"
#include "worker/engine/planner.h"
#include "worker/train/objectives/sequence_logprobs.h"

namespace sbp::testing {
namespace {

ParameterStore Must(absl::StatusOr<ParameterStore> store) {
  CHECK_OK(store.status());
  return *std::move(store);
}

struct LoraHarness {
  ModelConfig config;
  LoraOptions lora;
  CpuAllocator allocator;
  std::unique_ptr<CpuBackend> backend;
  ParameterStore weights, adapters, grads, exp_avg, exp_avg_sq, reference;
  bool with_reference;

  LoraHarness(const ModelConfig& c, const LoraOptions& l, bool reference_model)
      : config(c), lora(l), with_reference(reference_model) {
    backend = std::make_unique<CpuBackend>(allocator);
    weights = Must(ParameterStore::Create(config, allocator, "weights"));
    adapters = Must(CreateLoraStore(config, lora, allocator, "adapters"));
    grads = Must(CreateLoraStore(config, lora, allocator, "adapter gradients"));
    exp_avg = Must(CreateLoraStore(config, lora, allocator, "exp_avg"));
    exp_avg_sq = Must(CreateLoraStore(config, lora, allocator, "exp_avg_sq"));
    if (with_reference) reference = Must(ParameterStore::Create(config, allocator, "reference"));
  }

  int64_t MeasureStep(const PlanRequest& r) {
    Engine engine(config, *backend, {r.mode, r.chunk_tokens, r.logits_chunk_tokens});
    TokenSequence sequence;
    for (int64_t t = 0; t < r.seq_len; ++t) {
      sequence.input_ids.push_back(static_cast<int32_t>((t * 7919 + 11) % config.vocab_size));
    }
    sequence.labels = sequence.input_ids;
    for (int64_t t = 0; t < r.seq_len / 3; ++t) sequence.labels[t] = kIgnoreIndex;
    ModelTensors w = BindModelTensors(weights);
    AttachAdapters(adapters, w);
    ModelTensors g = BindModelTensors(grads);
    allocator.ResetPeak();
    if (r.objective == PlanObjective::kSft) {
      CHECK_OK(SftForwardBackward(engine, w, {sequence}, g).status());
    } else {
      WeightedLogProbLoss loss(std::vector<float>(r.seq_len, 0.5f));
      CHECK_OK(RunTokenLoss(engine, w, sequence, loss, &g).status());
    }
    return allocator.peak_bytes();
  }
};

void CheckExact(const std::string& preset, const LoraOptions& lora, PlanObjective objective) {
  const ModelConfig config = *PresetConfig(preset);
  LoraHarness h(config, lora, objective != PlanObjective::kSft);
  struct Point {
    int64_t T, chunk, logits_chunk;
    BackwardMode mode;
  };
  const std::vector<Point> grid = {
      {7, 0, 0, BackwardMode::kFull},        {7, 0, 0, BackwardMode::kCheckpoint},
      {7, 3, 2, BackwardMode::kStream},      {96, 0, 0, BackwardMode::kFull},
      {96, 0, 0, BackwardMode::kCheckpoint}, {96, 16, 32, BackwardMode::kStream},
      {300, 0, 0, BackwardMode::kStream},    {300, 100, 64, BackwardMode::kStream}};
  for (const Point& p : grid) {
    PlanRequest r;
    r.config = config;
    r.seq_len = p.T;
    r.mode = p.mode;
    r.chunk_tokens = p.chunk;
    r.logits_chunk_tokens = p.logits_chunk;
    r.objective = objective;
    r.reference_model = h.with_reference;
    r.lora = lora;
    auto plan = PlanMemory(r);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const int64_t measured = h.MeasureStep(r);
    EXPECT_EQ(plan->peak_bytes, measured)
        << preset << " r=" << lora.r << " " << BackwardModeName(p.mode) << " T=" << p.T
        << " chunk=" << p.chunk << ": " << SummarizeBreakdown(*plan, 20);
  }
}

LoraOptions Lora(int64_t r, std::vector<std::string> modules) {
  LoraOptions o;
  o.r = r;
  o.alpha = 2.0 * r;
  o.target_modules = std::move(modules);
  return o;
}

TEST(LoraPlanner, ExactAgainstTheAllocator) {
  for (const std::string preset : {"tiny-qwen3", "tiny-llama", "tiny-qwen2"}) {
    CheckExact(preset, Lora(8, LoraModuleNames()), PlanObjective::kSft);
  }
  CheckExact("tiny-qwen3", Lora(1, {"q_proj", "v_proj"}), PlanObjective::kSft);
  CheckExact("tiny-llama", Lora(16, {"o_proj", "down_proj"}), PlanObjective::kDpo);
}

TEST(LoraPlanner, TermsCoverOnlyTheAdapters) {
  PlanRequest r;
  r.config = *PresetConfig("tiny-qwen3");
  r.seq_len = 128;
  r.lora = Lora(4, LoraModuleNames());
  auto plan = PlanMemory(r);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const ModelConfig& c = r.config;
  int64_t per_layer = 0;
  for (const std::string& m : LoraModuleNames()) {
    const auto [in, out] = LoraModuleShape(c, m);
    per_layer += 4 * (in + out);
  }
  const int64_t adapter_bytes = 4 * per_layer * c.num_hidden_layers;
  EXPECT_EQ(plan->Term("weights"), 4 * ParameterCount(c));
  // Each layer group is one allocation, padded to 64 bytes; the empty edge
  // groups hold one element each.
  EXPECT_GE(plan->Term("gradients"), adapter_bytes);
  EXPECT_LE(plan->Term("gradients"), adapter_bytes + 2 * 4 + 64 * c.num_hidden_layers);
  EXPECT_EQ(plan->Term("adapter_weights"), plan->Term("gradients"));
  EXPECT_EQ(plan->Term("optimizer_moments"), 2 * plan->Term("gradients"));

  // The same job without LoRA needs gradients and moments for every weight.
  PlanRequest full = r;
  full.lora = LoraOptions();
  EXPECT_GT(PlanMemory(full)->peak_bytes - plan->peak_bytes, 2 * plan->Term("weights"));

  PlanRequest bad = r;
  bad.lora.target_modules = {"qkv"};
  EXPECT_NE(PlanMemory(bad).status().message().find("qkv"), std::string::npos);
}

}  // namespace
}  // namespace sbp::testing
