// The memory planner against the allocator: for every preset that runs on the
// CPU, every mode and a grid of sequence lengths and chunk sizes, the
// predicted peak of a training step is within 5% of CpuAllocator's measured
// peak (weights, gradients, optimizer state and, for DPO/GRPO, the reference
// model held as the trainer holds them). The tiny presets run the real CPU
// kernels; bench-qwen3 runs them at one short length and uses NullBackend
// (same allocations, no arithmetic) for the rest of its grid.
#include "worker/engine/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "tests/worker/engine/null_backend.h"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/train/objectives/sequence_logprobs.h"

namespace sbp::testing {
namespace {

using ::testing::HasSubstr;

constexpr double kTolerance = 0.05;

// A model's persistent state in one allocator, as the trainer holds it.
struct Harness {
  ModelConfig config;
  CpuAllocator allocator;
  std::unique_ptr<Backend> backend;
  ParameterStore weights, grads, exp_avg, exp_avg_sq, reference;
  bool optimizer = false, with_reference = false;

  Harness(const ModelConfig& c, bool real_kernels, bool optimizer_state, bool reference_model)
      : config(c), optimizer(optimizer_state), with_reference(reference_model) {
    if (real_kernels) {
      backend = std::make_unique<CpuBackend>(allocator);
    } else {
      backend = std::make_unique<NullBackend>(allocator);
    }
    // Zero weights keep every value finite; memory does not depend on values.
    weights = Must(ParameterStore::Create(config, allocator, "weights"));
    grads = Must(ParameterStore::Create(config, allocator, "gradients"));
    if (optimizer) {
      exp_avg = Must(ParameterStore::Create(config, allocator, "AdamW exp_avg"));
      exp_avg_sq = Must(ParameterStore::Create(config, allocator, "AdamW exp_avg_sq"));
    }
    if (with_reference) {
      reference = Must(ParameterStore::Create(config, allocator, "reference weights"));
    }
  }

  static ParameterStore Must(absl::StatusOr<ParameterStore> store) {
    CHECK_OK(store.status());
    return *std::move(store);
  }

  // Peak bytes of one step (persistent state included).
  int64_t MeasureStep(const PlanRequest& r) {
    Engine engine(config, *backend, {r.mode, r.chunk_tokens, r.logits_chunk_tokens});
    const Engine::ChunkPlan chunks = engine.PlanChunks(r.seq_len, /*training=*/true);
    TokenSequence sequence;
    for (int64_t t = 0; t < r.seq_len; ++t) {
      sequence.input_ids.push_back(static_cast<int32_t>((t * 7919 + 11) % config.vocab_size));
    }
    sequence.labels = sequence.input_ids;
    for (int64_t t = 0; t < r.seq_len / 3; ++t) sequence.labels[t] = kIgnoreIndex;  // a prompt
    ModelTensors w = BindModelTensors(weights);
    ModelTensors g = BindModelTensors(grads);
    allocator.ResetPeak();
    if (r.objective == PlanObjective::kSft) {
      auto result = SftForwardBackward(engine, w, {sequence}, g);
      CHECK_OK(result.status());
    } else {
      WeightedLogProbLoss loss(std::vector<float>(r.seq_len, 0.5f));
      auto result = RunTokenLoss(engine, w, sequence, loss, &g);
      CHECK_OK(result.status());
    }
    last_chunks = chunks;
    return allocator.peak_bytes();
  }

  Engine::ChunkPlan last_chunks{};
};

struct GridPoint {
  int64_t tokens, chunk, logits_chunk;
  BackwardMode mode;
};

std::vector<GridPoint> Grid(const std::vector<int64_t>& tokens, const std::vector<int64_t>& chunks,
                            const std::vector<int64_t>& logits_chunks) {
  std::vector<GridPoint> grid;
  for (int64_t T : tokens) {
    grid.push_back({T, 0, 0, BackwardMode::kFull});
    grid.push_back({T, 0, 0, BackwardMode::kCheckpoint});
    for (int64_t c : chunks) {
      for (int64_t lc : logits_chunks) grid.push_back({T, c, lc, BackwardMode::kStream});
    }
  }
  return grid;
}

double RelativeError(int64_t predicted, int64_t measured) {
  return std::abs(static_cast<double>(predicted - measured)) / static_cast<double>(measured);
}

// Runs the grid on `h`; returns the largest relative error.
double CheckGrid(Harness& h, const std::string& name, const std::vector<GridPoint>& grid,
                 PlanObjective objective) {
  double worst = 0;
  for (const GridPoint& p : grid) {
    PlanRequest r;
    r.config = h.config;
    r.seq_len = p.tokens;
    r.mode = p.mode;
    r.chunk_tokens = p.chunk;
    r.logits_chunk_tokens = p.logits_chunk;
    r.objective = objective;
    r.reference_model = h.with_reference;
    r.optimizer_state = h.optimizer;
    auto plan = PlanMemory(r);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) continue;
    const int64_t measured = h.MeasureStep(r);
    const double error = RelativeError(plan->peak_bytes, measured);
    worst = std::max(worst, error);
    EXPECT_LE(error, kTolerance) << name << " " << BackwardModeName(p.mode) << " T=" << p.tokens
                                 << " chunk=" << p.chunk << " logits_chunk=" << p.logits_chunk
                                 << ": predicted " << plan->peak_bytes << ", measured " << measured
                                 << " (" << SummarizeBreakdown(*plan, 20) << ")";
    EXPECT_EQ(plan->chunk_tokens, h.last_chunks.chunk);
    EXPECT_EQ(plan->logits_chunk_tokens, h.last_chunks.logits_chunk);
    int64_t sum = 0;
    for (const MemoryTerm& t : plan->breakdown) sum += t.bytes;
    EXPECT_EQ(sum, plan->peak_bytes);
  }
  std::printf("%s (%s, optimizer %d): %zu configurations, max relative error %.6f\n", name.c_str(),
              std::string(PlanObjectiveName(objective)).c_str(), h.optimizer, grid.size(), worst);
  return worst;
}

ModelConfig Preset(const std::string& name) {
  auto config = PresetConfig(name);
  CHECK_OK(config.status());
  return *config;
}

TEST(PlannerAccuracy, TinyPresetsEveryModeWithRealKernels) {
  // Tiny chunks at short lengths, large ones up to 1024 tokens.
  std::vector<GridPoint> grid = Grid({2, 7, 64, 200}, {0, 1, 16, 100}, {0, 8, 64, 333});
  for (const GridPoint& p : Grid({1024}, {0, 100, 1024}, {0, 333, 1024})) grid.push_back(p);
  for (const std::string name : {"tiny-qwen3", "tiny-llama", "tiny-qwen2"}) {
    Harness h(Preset(name), /*real_kernels=*/true, /*optimizer_state=*/true, false);
    CheckGrid(h, name, grid, PlanObjective::kSft);
  }
}

TEST(PlannerAccuracy, PreferenceObjectivesWithReferenceModel) {
  const auto grid = Grid({5, 96, 300}, {0, 32}, {0, 16});
  for (const std::string name : {"tiny-qwen3", "tiny-llama"}) {
    Harness dpo(Preset(name), true, /*optimizer_state=*/true, /*reference_model=*/true);
    CheckGrid(dpo, name, grid, PlanObjective::kDpo);
    Harness grpo(Preset(name), true, /*optimizer_state=*/false, /*reference_model=*/false);
    CheckGrid(grpo, name, grid, PlanObjective::kGrpo);
  }
}

TEST(PlannerAccuracy, BenchQwen3RealKernelsAtOneLength) {
  Harness h(Preset("bench-qwen3"), /*real_kernels=*/true, /*optimizer_state=*/false, false);
  CheckGrid(h, "bench-qwen3", Grid({48}, {20}, {32}), PlanObjective::kSft);
}

TEST(PlannerAccuracy, BenchQwen3GridWithoutArithmetic) {
  Harness h(Preset("bench-qwen3"), /*real_kernels=*/false, /*optimizer_state=*/false, false);
  CheckGrid(h, "bench-qwen3", Grid({512, 1000, 2048}, {0, 64, 256, 1024}, {0, 100, 512, 2048}),
            PlanObjective::kSft);
}

// ---------------------------------------------------------------------------
// The model's terms.

PlanRequest Request(const std::string& preset, int64_t T, BackwardMode mode) {
  PlanRequest r;
  r.config = Preset(preset);
  r.seq_len = T;
  r.mode = mode;
  return r;
}

TEST(Planner, BreakdownNamesTheTermsOfEachMode) {
  PlanRequest r = Request("bench-qwen3", 4096, BackwardMode::kCheckpoint);
  MemoryPlan checkpoint = *PlanMemory(r);
  EXPECT_EQ(checkpoint.peak_phase, "lm_head");
  const int64_t V = r.config.vocab_size, H = r.config.hidden_size;
  EXPECT_EQ(checkpoint.Term("logits"), 4096 * V * 4);
  EXPECT_EQ(checkpoint.Term("logits_gradient"), 4096 * V * 4);
  EXPECT_EQ(checkpoint.Term("layer_inputs"), 5 * 4096 * H * 4);
  EXPECT_EQ(checkpoint.Term("weights"), ParameterCount(r.config) * 4);
  EXPECT_EQ(checkpoint.Term("gradients"), ParameterCount(r.config) * 4);
  EXPECT_EQ(checkpoint.Term("optimizer_moments"), 2 * ParameterCount(r.config) * 4);
  EXPECT_EQ(checkpoint.Term("master_weights"), 0);  // fp32 weights are the master copy

  r.mode = BackwardMode::kStream;
  r.chunk_tokens = 256;
  r.logits_chunk_tokens = 128;
  MemoryPlan stream = *PlanMemory(r);
  EXPECT_EQ(stream.Term("logits"), 128 * V * 4);
  EXPECT_EQ(stream.Term("logits_gradient"), 0);  // overwritten in place
  EXPECT_LT(stream.peak_bytes, checkpoint.peak_bytes);
  EXPECT_GT(stream.Term("kv_buffers"), 0);
  EXPECT_GT(stream.Term("chunk_activations"), 0);

  r.optimizer_state = false;
  MemoryPlan bp_only = *PlanMemory(r);
  EXPECT_EQ(bp_only.Term("optimizer_moments"), 0);
  EXPECT_EQ(stream.peak_bytes - bp_only.peak_bytes, stream.Term("optimizer_moments"));
}

TEST(Planner, Bf16OnCudaHalvesWeightsAndActivationsAndAddsMasterWeights) {
  PlanRequest r = Request("qwen3-8b", 8192, BackwardMode::kStream);
  r.device = DeviceKind::kCuda;
  r.precision = DType::kBF16;
  MemoryPlan plan = *PlanMemory(r);
  const int64_t P = ParameterCount(r.config);
  EXPECT_EQ(plan.Term("weights"), 2 * P);
  EXPECT_EQ(plan.Term("gradients"), 2 * P);
  EXPECT_EQ(plan.Term("master_weights"), 4 * P);
  EXPECT_EQ(plan.Term("optimizer_moments"), 8 * P);
  EXPECT_EQ(plan.Term("layer_inputs") % (8192 * 4096 * 2), 0);
  EXPECT_GT(plan.Term("cuda_context"), 0);
  EXPECT_EQ(plan.Term("cublas_workspace"), 32 << 20);                // from the allocator
  EXPECT_EQ(plan.device_overhead_bytes, plan.Term("cuda_context"));  // outside it
  EXPECT_EQ(plan.allocator_peak_bytes(), plan.peak_bytes - plan.Term("cuda_context"));
  // f32 gradients (the CUDA backend's parameter-gradient dtype) when asked.
  r.gradient_precision = DType::kF32;
  EXPECT_EQ(PlanMemory(r)->Term("gradients"), 4 * P);
  r.gradient_precision.reset();

  r.device = DeviceKind::kCpu;
  auto cpu = PlanMemory(r);
  ASSERT_FALSE(cpu.ok());
  EXPECT_THAT(std::string(cpu.status().message()), HasSubstr("precision"));
}

// The CUDA ops' transient scratch is planned: the largest one of the peak
// phase (planner_terms.cc). With whole-sequence chunks at 128k the bf16
// rounding of the f32 dK/dV rows before the k/v projections is the largest:
// T x kv x 2 bytes = 256 MiB for Qwen3-8B. The CPU's kernels take none from
// the allocator, so its exact plan has no such term.
TEST(Planner, CudaKernelScratchIsTheLargestOpScratchOfThePhase) {
  PlanRequest r = Request("qwen3-8b", 131072, BackwardMode::kStream);
  r.device = DeviceKind::kCuda;
  r.precision = DType::kBF16;
  r.chunk_tokens = 131072;
  r.logits_chunk_tokens = 512;
  MemoryPlan whole = *PlanMemory(r);
  ASSERT_EQ(whole.peak_phase, "layer_backward");
  EXPECT_EQ(whole.Term("kernel_scratch"), int64_t{131072} * r.config.kv_dim() * 2);
  EXPECT_EQ(whole.Term("kernel_scratch"), int64_t{256} << 20);

  // 4096-row chunks: the rounding is 8 MiB, still above the attention delta
  // (4096 x 32 x 4 = 512 KiB) and the norms' column partials (2 MiB).
  r.chunk_tokens = 4096;
  MemoryPlan chunked = *PlanMemory(r);
  if (chunked.peak_phase == "layer_backward") {
    EXPECT_EQ(chunked.Term("kernel_scratch"), int64_t{4096} * r.config.kv_dim() * 2);
  } else {
    ASSERT_EQ(chunked.peak_phase, "lm_head");
    // The final norm's partials over 512 rows: ColumnGroups(512, H) = 16 groups.
    EXPECT_EQ(chunked.Term("kernel_scratch"), int64_t{16} * r.config.hidden_size * 4);
  }

  // fp32: no rounding on CUDA, no scratch term at all on the CPU.
  r.precision = DType::kF32;
  r.chunk_tokens = 131072;
  MemoryPlan f32 = *PlanMemory(r);
  EXPECT_GT(f32.Term("kernel_scratch"), 0);
  EXPECT_LT(f32.Term("kernel_scratch"), whole.Term("kernel_scratch"));
  r.device = DeviceKind::kCpu;
  EXPECT_EQ(PlanMemory(r)->Term("kernel_scratch"), 0);
}

TEST(Planner, Zero2ShardsGradientsAndOptimizerStateAndAddsTheOneLayerCache) {
  PlanRequest r = Request("qwen3-8b", 8192, BackwardMode::kStream);
  r.device = DeviceKind::kCuda;
  r.precision = DType::kBF16;
  r.world_size = 8;
  MemoryPlan plan = *PlanMemory(r);
  const ModelConfig& c = r.config;
  const int64_t layer = TotalElements(LayerParameterSpecs(c, 0));
  const int64_t embed = TotalElements(EmbeddingParameterSpecs(c));
  const int64_t final_group = TotalElements(FinalParameterSpecs(c));
  auto pad = [](int64_t n) { return (n + 7) / 8 * 8; };
  const int64_t padded = pad(embed) + c.num_hidden_layers * pad(layer) + pad(final_group);
  EXPECT_EQ(plan.Term("weights"), 2 * padded);
  EXPECT_EQ(plan.Term("gradients"), 0);
  EXPECT_EQ(plan.Term("gradient_shards"), 4 * padded / 8);
  EXPECT_EQ(plan.Term("master_weights"), 4 * padded / 8);
  EXPECT_EQ(plan.Term("optimizer_moments"), 8 * padded / 8);
  EXPECT_EQ(plan.Term("gradient_cache"), 2 * 4 * pad(layer));
  EXPECT_EQ(plan.Term("comm_buffer"), 0);  // NCCL reduces in place
  EXPECT_GT(plan.Term("nccl_buffers"), 0);
  if (plan.peak_phase == "lm_head") {
    EXPECT_EQ(plan.Term("head_gradient_buffer"), 4 * pad(final_group));
  }
  // fp32 compute: the master shard is a view of the weights.
  r.precision = DType::kF32;
  EXPECT_EQ(PlanMemory(r)->Term("master_weights"), 0);
  // On the CPU, Gloo's ring receives one chunk into a buffer of the allocator.
  r.device = DeviceKind::kCpu;
  EXPECT_EQ(PlanMemory(r)->Term("comm_buffer"), 4 * pad(std::max(embed, final_group)) / 8);
  r.device = DeviceKind::kCuda;
  // World size 1: full gradients and moments, no cache.
  r.world_size = 1;
  MemoryPlan single = *PlanMemory(r);
  EXPECT_EQ(single.Term("gradient_cache"), 0);
  EXPECT_EQ(single.Term("gradients"), 4 * ParameterCount(c));
}

TEST(Planner, TiedEmbeddingBufferLivesFromTheHeadOnUnderZero2) {
  PlanRequest r = Request("qwen3-4b", 4096, BackwardMode::kStream);
  r.device = DeviceKind::kCuda;
  r.precision = DType::kBF16;
  r.world_size = 4;
  MemoryPlan plan = *PlanMemory(r);
  EXPECT_EQ(plan.Term("embedding_gradient_buffer"),
            4 * TotalElements(EmbeddingParameterSpecs(r.config)));
}

TEST(Planner, RejectsBadRequestsNamingTheField) {
  PlanRequest r = Request("tiny-qwen3", 0, BackwardMode::kStream);
  EXPECT_THAT(std::string(PlanMemory(r).status().message()), HasSubstr("seq_len"));
  r.seq_len = 16;
  r.chunk_tokens = -1;
  EXPECT_THAT(std::string(PlanMemory(r).status().message()), HasSubstr("chunk_tokens"));
  r.chunk_tokens = 0;
  r.world_size = 0;
  EXPECT_THAT(std::string(PlanMemory(r).status().message()), HasSubstr("world_size"));
  r.world_size = 1;
  r.config.hidden_size = 0;
  EXPECT_THAT(std::string(PlanMemory(r).status().message()), HasSubstr("hidden_size"));
}

// ---------------------------------------------------------------------------
// auto chunk sizes and the longest sequence.

TEST(PlannerAuto, EngineDefaultLogitsChunksAreSizedForTheHeadGemms) {
  ModelConfig c = Preset("bench-qwen3");  // vocab 151936
  // CPU, fp32: 512 rows (311 MB of logits), the whole sequence when shorter.
  EXPECT_EQ(AutoLogitsChunkTokens(c, 8192, DeviceKind::kCpu, 4), 512);
  EXPECT_EQ(AutoLogitsChunkTokens(c, 300, DeviceKind::kCpu, 4), 300);
  // CUDA, bf16: 4096 rows (1.2 GB).
  EXPECT_EQ(AutoLogitsChunkTokens(c, 32768, DeviceKind::kCuda, 2), 4096);
  EXPECT_EQ(AutoLogitsChunkTokens(c, 2000, DeviceKind::kCuda, 2), 2000);
  // A large vocabulary: as many multiples of 64 (256 on CUDA) rows as fit in
  // 512 MiB (2 GiB), at least one multiple.
  c.vocab_size = 1'000'000;
  EXPECT_EQ(AutoLogitsChunkTokens(c, 8192, DeviceKind::kCpu, 4), 128);
  EXPECT_EQ(AutoLogitsChunkTokens(c, 8192, DeviceKind::kCuda, 2), 1024);
  c.vocab_size = 50'000'000;
  EXPECT_EQ(AutoLogitsChunkTokens(c, 8192, DeviceKind::kCpu, 4), 64);
  EXPECT_EQ(AutoLogitsChunkTokens(c, 8192, DeviceKind::kCuda, 2), 256);

  // The planner predicts what the engine runs on each device.
  PlanRequest r = Request("bench-qwen3", 8192, BackwardMode::kStream);
  EXPECT_EQ(PlanMemory(r)->logits_chunk_tokens, 512);
  EXPECT_EQ(PlanMemory(r)->Term("logits"), 512 * r.config.vocab_size * 4);
  r.device = DeviceKind::kCuda;
  r.precision = DType::kBF16;
  EXPECT_EQ(PlanMemory(r)->logits_chunk_tokens, 4096);
  EXPECT_EQ(PlanMemory(r)->Term("logits"), 4096 * r.config.vocab_size * 2);
}

TEST(PlannerAuto, ChoosesTheLargestChunksThatFit) {
  PlanRequest r = Request("bench-qwen3", 8192, BackwardMode::kStream);
  MemoryPlan smallest = *PlanMinimum(r);
  EXPECT_EQ(smallest.chunk_tokens, kMinAutoChunkTokens);
  EXPECT_EQ(smallest.logits_chunk_tokens, kMinAutoChunkTokens);
  const double margin = 0.05;
  // Plenty of memory: whole-sequence chunks.
  MemoryPlan roomy = *PlanAutoChunks(r, int64_t{1} << 40, margin);
  EXPECT_EQ(roomy.chunk_tokens, 8192);
  EXPECT_EQ(roomy.logits_chunk_tokens, 8192);
  // Just enough for the smallest chunks: the smallest chunks.
  const int64_t tight_memory =
      static_cast<int64_t>(std::ceil(smallest.peak_bytes / (1 - margin))) + 1;
  MemoryPlan tight = *PlanAutoChunks(r, tight_memory, margin);
  EXPECT_EQ(tight.chunk_tokens, kMinAutoChunkTokens);
  EXPECT_LE(tight.peak_bytes, UsableBytes(tight_memory, margin));
  // In between: the chosen plan fits and doubling either size would not.
  const int64_t middle = smallest.peak_bytes + (int64_t{600} << 20);
  MemoryPlan chosen = *PlanAutoChunks(r, middle, margin);
  EXPECT_LE(chosen.peak_bytes, UsableBytes(middle, margin));
  EXPECT_GT(chosen.chunk_tokens, kMinAutoChunkTokens);
  for (int which = 0; which < 2; ++which) {
    PlanRequest bigger = r;
    bigger.chunk_tokens = chosen.chunk_tokens * (which == 0 ? 2 : 1);
    bigger.logits_chunk_tokens = chosen.logits_chunk_tokens * (which == 1 ? 2 : 1);
    if (bigger.chunk_tokens > 8192 || bigger.logits_chunk_tokens > 8192) continue;
    EXPECT_GT(PlanMemory(bigger)->peak_bytes, UsableBytes(middle, margin)) << which;
  }
  // A fixed size is kept.
  r.chunk_tokens = 100;
  EXPECT_EQ(PlanAutoChunks(r, middle, margin)->chunk_tokens, 100);
}

TEST(PlannerAuto, TooLittleMemoryIsResourceExhaustedWithTheNumbers) {
  PlanRequest r = Request("bench-qwen3", 8192, BackwardMode::kStream);
  auto plan = PlanAutoChunks(r, int64_t{512} << 20, 0.05);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(plan.status().message());
  EXPECT_THAT(message, HasSubstr("stream mode at seq_len 8192 needs"));
  EXPECT_THAT(message, HasSubstr("chunk_tokens 64 and logits_chunk_tokens 64"));
  EXPECT_THAT(message, HasSubstr("weights"));
  EXPECT_THAT(message, HasSubstr("512.0 MiB"));
  EXPECT_THAT(message, HasSubstr("5% safety margin"));
}

TEST(PlannerAuto, AutoChunksRunWithinTheirBudget) {
  // The engine, given the chunks auto chose and an allocator budget of the
  // memory, runs the step without running out.
  PlanRequest r = Request("tiny-qwen3", 768, BackwardMode::kStream);
  const int64_t memory = PlanMinimum(r)->peak_bytes * 11 / 10;
  MemoryPlan plan = *PlanAutoChunks(r, memory, 0.0);
  Harness h(r.config, /*real_kernels=*/true, /*optimizer_state=*/true, false);
  h.allocator.set_budget_bytes(memory);
  r.chunk_tokens = plan.chunk_tokens;
  r.logits_chunk_tokens = plan.logits_chunk_tokens;
  EXPECT_EQ(h.MeasureStep(r), plan.peak_bytes);
}

TEST(PlannerAuto, MaxSequenceLengthIsTheLongestThatFits) {
  PlanRequest r = Request("bench-qwen3", 1, BackwardMode::kStream);
  r.optimizer_state = false;
  const int64_t memory = int64_t{4} << 30;
  for (BackwardMode mode :
       {BackwardMode::kFull, BackwardMode::kCheckpoint, BackwardMode::kStream}) {
    r.mode = mode;
    const int64_t longest = *MaxSequenceLength(r, memory, 0.05);
    ASSERT_GT(longest, 0) << BackwardModeName(mode);
    r.seq_len = longest;
    EXPECT_TRUE(PlanAutoChunks(r, memory, 0.05).ok());
    r.seq_len = longest + 1;
    EXPECT_FALSE(PlanAutoChunks(r, memory, 0.05).ok());
  }
  r.mode = BackwardMode::kStream;
  const int64_t stream = *MaxSequenceLength(r, memory, 0.05);
  r.mode = BackwardMode::kCheckpoint;
  EXPECT_GT(stream, 2 * *MaxSequenceLength(r, memory, 0.05));
  EXPECT_EQ(*MaxSequenceLength(r, 1 << 20, 0.05), 0);  // the weights alone do not fit
}

}  // namespace
}  // namespace sbp::testing
