// The planner and the memory tiers (planner.h, "Memory tiers"): the host and
// disk checkpoint tiers leave two layer-input slots on the device and put the
// rest in host memory or a file; the optimizer offload moves the gradients,
// master weights and moments to host memory; PlanTiers takes the fastest tier
// that fits and names what is short when none does; MaxSequenceLength per
// tier. On the CPU the planned device and host peaks are the allocators'
// measured peaks of a step with a checkpoint store. Last, the long-context
// targets: Qwen3-8B and Llama-3.1-8B, bf16, full fine-tuning with the
// optimizer offloaded, host tier with 1.8 TiB of host memory, reach 1M tokens
// on an 80 GiB GPU and 2M on a 141 GB one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/offload/checkpoint_store.h"
#include "worker/engine/parameter_store.h"
#include "worker/engine/planner.h"
#include "worker/engine/planner_terms.h"

namespace sbp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ModelConfig Preset(const std::string& name) {
  auto config = PresetConfig(name);
  CHECK_OK(config.status());
  return *config;
}

// bf16 on CUDA, stream mode, fixed chunks.
PlanRequest Cuda(const std::string& preset, int64_t T, int64_t chunk = 64,
                 int64_t logits_chunk = 64) {
  PlanRequest r;
  r.config = Preset(preset);
  r.seq_len = T;
  r.mode = BackwardMode::kStream;
  r.chunk_tokens = chunk;
  r.logits_chunk_tokens = logits_chunk;
  r.device = DeviceKind::kCuda;
  r.precision = DType::kBF16;
  return r;
}

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

int64_t Sum(const std::vector<MemoryTerm>& terms) {
  int64_t sum = 0;
  for (const MemoryTerm& t : terms) sum += t.bytes;
  return sum;
}

// ---------------------------------------------------------------------------
// Checkpoint tiers.

TEST(PlannerTiers, HostAndDiskTiersHoldTwoDeviceSlots) {
  // Logits chunks of the whole sequence keep the LM head the peak phase in
  // every tier, so the tiers differ by exactly their layer inputs there.
  const int64_t T = 8192;
  PlanRequest r = Cuda("qwen3-8b", T, 64, T);
  const int64_t L = r.config.num_hidden_layers, H = r.config.hidden_size;
  const int64_t input = T * H * 2;  // one [T, H] bf16, a multiple of 256
  const MemoryPlan device = *PlanMemory(r);
  ASSERT_EQ(device.peak_phase, "lm_head");
  EXPECT_EQ(device.Term("layer_inputs"), (L + 1) * input);
  EXPECT_EQ(device.host_bytes, 0);
  EXPECT_TRUE(device.host_breakdown.empty());
  EXPECT_EQ(device.disk_bytes, 0);
  EXPECT_EQ(device.copy_bytes_per_pass, 0);
  EXPECT_EQ(device.copy_bytes_per_step, 0);
  EXPECT_EQ(device.checkpoint_tier, CheckpointTier::kDevice);

  for (CheckpointTier tier : {CheckpointTier::kHost, CheckpointTier::kDisk}) {
    SCOPED_TRACE(std::string(CheckpointTierName(tier)));
    r.checkpoint_tier = tier;
    const MemoryPlan plan = *PlanMemory(r);
    EXPECT_EQ(plan.checkpoint_tier, tier);
    ASSERT_EQ(plan.peak_phase, "lm_head");
    EXPECT_EQ(plan.Term("layer_inputs"), 0);
    EXPECT_EQ(plan.Term("layer_input_slots"), 2 * input);
    // The model state is the device tier's; the peak is it plus 2 slots in
    // place of L + 1 inputs.
    EXPECT_EQ(plan.model_state_bytes, device.model_state_bytes);
    EXPECT_EQ(plan.peak_bytes, device.peak_bytes - (L + 1) * input + 2 * input);
    EXPECT_EQ(Sum(plan.breakdown), plan.peak_bytes);
    EXPECT_EQ(plan.copy_bytes_per_pass, 2 * (L - 1) * input);
    EXPECT_EQ(plan.copy_bytes_per_step, 0);
  }
}

TEST(PlannerTiers, SlotsPerPhase) {
  PlanRequest r = Cuda("qwen3-8b", 4096);
  using planner::Phase;
  for (CheckpointTier tier :
       {CheckpointTier::kDevice, CheckpointTier::kHost, CheckpointTier::kDisk}) {
    r.checkpoint_tier = tier;
    const planner::StepShape s = planner::ShapeOf(r);
    auto term = [&](Phase phase, absl::string_view name) {
      const planner::Ledger ledger = planner::PhaseActivations(s, phase);
      for (const planner::LedgerTerm& t : ledger.terms()) {
        if (t.name == name) return t.bytes;
      }
      return int64_t{0};
    };
    const int64_t input = 4096 * 4096 * 2, L = s.L;
    const bool device = tier == CheckpointTier::kDevice;
    EXPECT_EQ(term(Phase::kLmHead, "layer_inputs"), device ? (L + 1) * input : 0);
    EXPECT_EQ(term(Phase::kLayerBackward, "layer_inputs"), device ? L * input : 0);
    EXPECT_EQ(term(Phase::kEmbeddingBackward, "layer_inputs"), device ? input : 0);
    EXPECT_EQ(term(Phase::kLmHead, "layer_input_slots"), device ? 0 : 2 * input);
    EXPECT_EQ(term(Phase::kLayerBackward, "layer_input_slots"), device ? 0 : 2 * input);
    EXPECT_EQ(term(Phase::kEmbeddingBackward, "layer_input_slots"), 0);
  }
}

TEST(PlannerTiers, HostAndDiskBytesAreTheStoredInputsRounded) {
  // An odd hidden size so that a [T, H] f32 input is not a multiple of the
  // CPU allocator's 64 bytes: 3 x 36 x 4 = 432 -> 448.
  PlanRequest r;
  r.config = Preset("bench-qwen3");
  r.config.hidden_size = 36;
  r.seq_len = 3;
  r.chunk_tokens = 2;
  r.logits_chunk_tokens = 2;
  const int64_t L = r.config.num_hidden_layers;
  ASSERT_TRUE(PlanMemory(r).ok()) << PlanMemory(r).status();

  r.checkpoint_tier = CheckpointTier::kHost;
  MemoryPlan host = *PlanMemory(r);
  EXPECT_EQ(host.HostTerm("host_layer_inputs"), (L - 1) * 3 * 36 * 4);
  EXPECT_EQ(host.host_bytes, (L - 1) * RoundUp(3 * 36 * 4, 64));
  EXPECT_EQ(host.host_bytes, (L - 1) * 448);
  EXPECT_EQ(host.HostTerm("allocator_rounding"), (L - 1) * (448 - 432));
  EXPECT_EQ(Sum(host.host_breakdown), host.host_bytes);
  EXPECT_EQ(host.disk_bytes, 0);
  EXPECT_EQ(host.copy_bytes_per_pass, 2 * (L - 1) * 432);

  // The disk tier on the CPU: the file, and no host memory (the queue's
  // thread writes straight from the device slot).
  r.checkpoint_tier = CheckpointTier::kDisk;
  MemoryPlan disk = *PlanMemory(r);
  EXPECT_EQ(disk.disk_bytes, (L - 1) * 432);
  EXPECT_EQ(disk.host_bytes, 0);
  EXPECT_EQ(disk.copy_bytes_per_pass, 2 * (L - 1) * 432);

  // On CUDA: 256-byte rounding and, for the disk tier, two pinned staging buffers.
  PlanRequest cuda = Cuda("qwen3-8b", 1000);
  const int64_t input = 1000 * 4096 * 2, Lq = cuda.config.num_hidden_layers;
  cuda.checkpoint_tier = CheckpointTier::kHost;
  MemoryPlan cuda_host = *PlanMemory(cuda);
  EXPECT_EQ(cuda_host.HostTerm("host_layer_inputs"), (Lq - 1) * input);
  EXPECT_EQ(cuda_host.host_bytes, (Lq - 1) * RoundUp(input, 256));
  cuda.checkpoint_tier = CheckpointTier::kDisk;
  MemoryPlan cuda_disk = *PlanMemory(cuda);
  EXPECT_EQ(cuda_disk.disk_bytes, (Lq - 1) * input);
  EXPECT_EQ(cuda_disk.HostTerm("disk_staging"), 2 * input);
  EXPECT_EQ(cuda_disk.host_bytes, 2 * RoundUp(input, 256));

  // One layer: nothing is stored off the device.
  cuda.config.num_hidden_layers = 1;
  cuda.checkpoint_tier = CheckpointTier::kHost;
  MemoryPlan one = *PlanMemory(cuda);
  EXPECT_EQ(one.host_bytes, 0);
  EXPECT_EQ(one.copy_bytes_per_pass, 0);
}

// ---------------------------------------------------------------------------
// Optimizer offload.

TEST(PlannerTiers, OptimizerOffloadMovesGradientsMastersAndMomentsToTheHost) {
  PlanRequest r = Cuda("qwen3-8b", 8192, 64, 8192);  // the LM head is the peak
  const ModelConfig& c = r.config;
  const int64_t P = ParameterCount(c);
  const int64_t layer = TotalElements(LayerParameterSpecs(c, 0));
  const int64_t embed = TotalElements(EmbeddingParameterSpecs(c));
  const int64_t final_group = TotalElements(FinalParameterSpecs(c));
  const MemoryPlan kept = *PlanMemory(r);
  r.optimizer_offload = true;
  const MemoryPlan plan = *PlanMemory(r);
  ASSERT_EQ(plan.peak_phase, "lm_head");
  // Device: the compute weights and ZeRO-2's buffers, for one worker too.
  EXPECT_EQ(plan.Term("weights"), 2 * P);
  for (const char* gone :
       {"gradients", "gradient_shards", "master_weights", "optimizer_moments", "comm_buffer"}) {
    EXPECT_EQ(plan.Term(gone), 0) << gone;
  }
  EXPECT_EQ(plan.Term("gradient_cache"), 2 * 4 * layer);
  EXPECT_EQ(plan.Term("head_gradient_buffer"), 4 * final_group);
  EXPECT_EQ(plan.Term("embedding_gradient_buffer"), 0);  // untied: only in its own phase
  EXPECT_EQ(plan.peak_bytes, kept.peak_bytes - kept.Term("gradients") -
                                 kept.Term("master_weights") - kept.Term("optimizer_moments") +
                                 2 * 4 * layer + 4 * final_group);
  // Host: f32 gradients, masters and moments, and the pinned staging.
  EXPECT_EQ(plan.HostTerm("host_gradients"), 4 * P);
  EXPECT_EQ(plan.HostTerm("host_master_weights"), 4 * P);
  EXPECT_EQ(plan.HostTerm("host_optimizer_moments"), 8 * P);
  // The bf16 upload's two staging buffers of at most 16 Mi elements; the
  // gradients land in their host store directly.
  EXPECT_EQ(plan.HostTerm("host_weight_staging"),
            2 * 2 * std::min<int64_t>(std::max({embed, layer, final_group}), 1 << 24));
  EXPECT_EQ(plan.HostTerm("host_weight_staging"), int64_t{64} << 20);
  EXPECT_EQ(plan.host_bytes, 16 * P + (int64_t{64} << 20));
  EXPECT_EQ(plan.HostTerm("host_layer_inputs"), 0);  // the device tier
  EXPECT_EQ(Sum(plan.host_breakdown), plan.host_bytes);
  EXPECT_EQ(plan.copy_bytes_per_step, 4 * P + 2 * P);  // gradients down, weights up
  EXPECT_EQ(plan.copy_bytes_per_pass, 0);

  // The embedding's buffer in its own phase; the head's also during the
  // first layer's backward (freed at that layer's Release).
  const planner::StepShape s = planner::ShapeOf(r);
  int64_t head_buffer = 0;
  const planner::Ledger layer_phase = planner::PhaseActivations(s, planner::Phase::kLayerBackward);
  for (const planner::LedgerTerm& t : layer_phase.terms()) {
    if (t.name == "head_gradient_buffer") head_buffer = t.bytes;
  }
  EXPECT_EQ(head_buffer, 4 * final_group);
  int64_t embedding_buffer = 0;
  const planner::Ledger embedding_phase =
      planner::PhaseActivations(s, planner::Phase::kEmbeddingBackward);
  for (const planner::LedgerTerm& t : embedding_phase.terms()) {
    if (t.name == "embedding_gradient_buffer") embedding_buffer = t.bytes;
  }
  EXPECT_EQ(embedding_buffer, 4 * embed);

  // Backprop only: the host holds the gradients (and their staging) alone.
  r.optimizer_state = false;
  const MemoryPlan bp = *PlanMemory(r);
  EXPECT_EQ(bp.HostTerm("host_gradients"), 4 * P);
  EXPECT_EQ(bp.HostTerm("host_master_weights"), 0);
  EXPECT_EQ(bp.HostTerm("host_optimizer_moments"), 0);
  EXPECT_EQ(bp.HostTerm("host_weight_staging"), 0);
  EXPECT_EQ(bp.host_bytes, 4 * P);
  EXPECT_EQ(bp.copy_bytes_per_step, 4 * P);
  EXPECT_EQ(bp.peak_bytes, plan.peak_bytes);  // the device is the same
}

TEST(PlannerTiers, OptimizerOffloadUnderZero2AndOnTheCpu) {
  PlanRequest r = Cuda("qwen3-8b", 8192);
  r.world_size = 8;
  const ModelConfig& c = r.config;
  auto pad = [](int64_t n) { return (n + 7) / 8 * 8; };
  const int64_t layer = pad(TotalElements(LayerParameterSpecs(c, 0)));
  const int64_t padded = pad(TotalElements(EmbeddingParameterSpecs(c))) +
                         c.num_hidden_layers * layer + pad(TotalElements(FinalParameterSpecs(c)));
  r.optimizer_offload = true;
  const MemoryPlan plan = *PlanMemory(r);
  EXPECT_EQ(plan.Term("gradient_shards"), 0);
  EXPECT_EQ(plan.Term("master_weights"), 0);
  EXPECT_EQ(plan.Term("gradient_cache"), 2 * 4 * layer);
  EXPECT_GT(plan.Term("nccl_buffers"), 0);
  EXPECT_EQ(plan.HostTerm("host_gradients"), 4 * padded / 8);
  EXPECT_EQ(plan.HostTerm("host_master_weights"), 4 * padded / 8);
  EXPECT_EQ(plan.HostTerm("host_optimizer_moments"), 8 * padded / 8);
  EXPECT_EQ(plan.copy_bytes_per_step, 4 * padded + 2 * padded);
  // bf16: one owned shard of the largest group staged for the upload.
  EXPECT_EQ(plan.HostTerm("host_weight_staging"),
            2 * pad(TotalElements(FinalParameterSpecs(c))) / 8);  // norm + lm_head
  // ZeRO-2's sink frees the head's buffer with the head, as without offload.
  const planner::Ledger layer_phase =
      planner::PhaseActivations(planner::ShapeOf(r), planner::Phase::kLayerBackward);
  for (const planner::LedgerTerm& t : layer_phase.terms()) {
    EXPECT_NE(t.name, "head_gradient_buffer");
  }

  // fp32 on the CPU: the masters are apart from the weights on the host, no
  // pinned staging; Gloo's buffer stays on the device for N > 1.
  PlanRequest cpu;
  cpu.config = Preset("bench-qwen3");
  cpu.seq_len = 256;
  cpu.optimizer_offload = true;
  const int64_t P = ParameterCount(cpu.config);
  MemoryPlan single = *PlanMemory(cpu);
  EXPECT_EQ(single.HostTerm("host_master_weights"), 4 * P);
  EXPECT_EQ(single.HostTerm("host_weight_staging"), 0);  // f32: the masters go up as they are
  EXPECT_EQ(single.host_bytes, 16 * P);
  EXPECT_EQ(single.Term("comm_buffer"), 0);
  EXPECT_EQ(single.copy_bytes_per_step, 4 * P + 4 * P);
  cpu.world_size = 2;
  EXPECT_GT(PlanMemory(cpu)->Term("comm_buffer"), 0);
}

TEST(PlannerTiers, OptimizerOffloadWithTiedEmbeddingsAndLora) {
  // Tied: the embedding's buffer lives from the LM head on.
  PlanRequest tied = Cuda("qwen3-4b", 4096, 64, 4096);
  tied.optimizer_offload = true;
  MemoryPlan plan = *PlanMemory(tied);
  EXPECT_EQ(plan.Term("embedding_gradient_buffer"),
            4 * TotalElements(EmbeddingParameterSpecs(tied.config)));

  // LoRA: the adapters' gradients, masters and moments go to the host.
  PlanRequest lora = Cuda("qwen3-8b", 4096);
  lora.lora.r = 16;
  lora.lora.alpha = 16;
  lora.lora.target_modules = {"q_proj", "v_proj"};
  const MemoryPlan on_device = *PlanMemory(lora);
  lora.optimizer_offload = true;
  const MemoryPlan offloaded = *PlanMemory(lora);
  const int64_t L = lora.config.num_hidden_layers;
  const int64_t adapters = L * 16 * ((4096 + 4096) + (4096 + 1024));
  EXPECT_EQ(offloaded.Term("adapter_weights"), on_device.Term("adapter_weights"));
  EXPECT_EQ(offloaded.Term("gradients"), 0);
  EXPECT_EQ(offloaded.Term("optimizer_moments"), 0);
  // The adapter groups plus the two (one-element) edge groups.
  EXPECT_EQ(offloaded.HostTerm("host_gradients"), 4 * (adapters + 2));
  EXPECT_EQ(offloaded.HostTerm("host_optimizer_moments"), 8 * (adapters + 2));
  EXPECT_EQ(offloaded.Term("gradient_cache"), 2 * 4 * (adapters / L));
  EXPECT_EQ(offloaded.copy_bytes_per_step, 6 * (adapters + 2));
}

// ---------------------------------------------------------------------------
// Choosing the tier.

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(PlannerTiers, PlanTiersTakesTheFastestTierThatFits) {
  PlanRequest r = Cuda("qwen3-8b", 1'000'000, 0, 0);
  r.optimizer_offload = true;
  const double margin = DefaultSafetyMargin(DeviceKind::kCuda);
  // Short sequences fit the device.
  PlanRequest short_request = r;
  short_request.seq_len = 32768;
  MemoryPlan device = *PlanTiers(short_request, 80 * kGiB, margin, 2048 * kGiB, 0);
  EXPECT_EQ(device.checkpoint_tier, CheckpointTier::kDevice);
  EXPECT_EQ(device.HostTerm("host_layer_inputs"), 0);
  EXPECT_GT(device.host_bytes, 0);  // the offloaded optimizer
  // A million tokens: host memory.
  MemoryPlan host = *PlanTiers(r, 80 * kGiB, margin, 2048 * kGiB, 0);
  EXPECT_EQ(host.checkpoint_tier, CheckpointTier::kHost);
  EXPECT_LE(host.peak_bytes, UsableBytes(80 * kGiB, margin));
  EXPECT_GT(host.HostTerm("host_layer_inputs"), 0);
  // Too little host memory for the inputs, but a disk: the disk.
  MemoryPlan disk = *PlanTiers(r, 80 * kGiB, margin, 200 * kGiB, 4 * (kGiB << 10));
  EXPECT_EQ(disk.checkpoint_tier, CheckpointTier::kDisk);
  EXPECT_LE(disk.host_bytes, UsableBytes(200 * kGiB, margin));
  EXPECT_EQ(disk.disk_bytes, int64_t{35} * 1'000'000 * 4096 * 2);
  // The request's own tier is ignored.
  r.checkpoint_tier = CheckpointTier::kDisk;
  EXPECT_EQ(PlanTiers(r, 80 * kGiB, margin, 2048 * kGiB, 0)->checkpoint_tier,
            CheckpointTier::kHost);
}

TEST(PlannerTiers, WhenNoTierFitsTheErrorNamesWhatIsShort) {
  PlanRequest r = Cuda("qwen3-8b", 1'000'000, 0, 0);
  r.optimizer_offload = true;
  const double margin = 0.10;
  // The host is short for the host tier, and there is no disk.
  auto plan = PlanTiers(r, 80 * kGiB, margin, 200 * kGiB, 0);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  std::string message(plan.status().message());
  EXPECT_THAT(message, HasSubstr("device tier: the device is short: stream mode at seq_len "
                                 "1000000 needs"));
  EXPECT_THAT(message, HasSubstr("host tier: host memory is short: host tier at seq_len 1000000 "
                                 "needs"));
  EXPECT_THAT(message, HasSubstr("host_layer_inputs 267.0 GiB"));
  EXPECT_THAT(message, HasSubstr("but the host's 200.0 GiB has 180.0 GiB usable"));
  EXPECT_THAT(message, HasSubstr("disk tier: not tried (no disk given)"));
  // Host short for both off-device tiers, and the disk too small.
  plan = PlanTiers(r, 80 * kGiB, margin, 100 * kGiB, 100 * kGiB);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  message = std::string(plan.status().message());
  EXPECT_THAT(message, HasSubstr("disk tier: host memory is short: disk tier at seq_len 1000000"));
  EXPECT_THAT(message, HasSubstr("the disk is short: disk tier at seq_len 1000000 needs a file "
                                 "of 267.0 GiB (286720000000 bytes), but the disk's 100.0 GiB "
                                 "has 90.0 GiB usable after the 10% safety margin"));
  // Too little device memory for even two slots: the device is short in every tier.
  plan = PlanTiers(r, 40 * kGiB, margin, 2048 * kGiB, 4096 * kGiB);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  message = std::string(plan.status().message());
  EXPECT_THAT(message, HasSubstr("host tier: the device is short"));
  EXPECT_THAT(message, HasSubstr("disk tier: the device is short"));
  EXPECT_THAT(message, Not(HasSubstr("host memory is short")));

  // One tier asked for: PlanTier checks the three resources (0: unlimited).
  r.checkpoint_tier = CheckpointTier::kHost;
  EXPECT_TRUE(PlanTier(r, 80 * kGiB, margin, 0, 0).ok());
  EXPECT_TRUE(PlanAutoChunks(r, 80 * kGiB, margin).ok());  // host memory unchecked
  plan = PlanTier(r, 80 * kGiB, margin, 200 * kGiB, 0);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("host tier: host memory is short"));
  EXPECT_EQ(PlanTier(r, 80 * kGiB, margin, -1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlannerTiers, MaxSequenceLengthPerTier) {
  PlanRequest r = Cuda("qwen3-8b", 1, 0, 0);
  r.optimizer_offload = true;
  const double margin = 0.10;
  const int64_t memory = 80 * kGiB, host_memory = 1024 * kGiB;
  auto longest = [&](CheckpointTier tier, int64_t host, int64_t disk) {
    PlanRequest trial = r;
    trial.checkpoint_tier = tier;
    const int64_t T = *MaxSequenceLength(trial, memory, margin, host, disk);
    trial.seq_len = T;
    EXPECT_TRUE(PlanTier(trial, memory, margin, host, disk).ok()) << T;
    trial.seq_len = T + 1;
    EXPECT_FALSE(PlanTier(trial, memory, margin, host, disk).ok()) << T;
    return T;
  };
  const int64_t device = longest(CheckpointTier::kDevice, host_memory, 0);
  const int64_t host = longest(CheckpointTier::kHost, host_memory, 0);
  const int64_t disk = longest(CheckpointTier::kDisk, host_memory, 0);
  EXPECT_GT(host, 5 * device);
  EXPECT_EQ(disk, host);  // the same device slots; host and disk are not the limit
  // With the device tier and no host limit the old search agrees.
  PlanRequest device_only = r;
  EXPECT_EQ(*MaxSequenceLength(device_only, memory, margin),
            longest(CheckpointTier::kDevice, 0, 0));

  // A small host limits the host tier: the first length past it is short of host memory.
  const int64_t small_host = 300 * kGiB;
  const int64_t limited = longest(CheckpointTier::kHost, small_host, 0);
  EXPECT_LT(limited, host);
  PlanRequest past = r;
  past.checkpoint_tier = CheckpointTier::kHost;
  past.seq_len = limited + 1;
  const std::string message(PlanTier(past, memory, margin, small_host, 0).status().message());
  EXPECT_THAT(message, HasSubstr("host memory is short"));
  EXPECT_THAT(message, Not(HasSubstr("device is short")));
  // ... and a small disk the disk tier.
  EXPECT_LT(longest(CheckpointTier::kDisk, small_host, 100 * kGiB), host);
}

// ---------------------------------------------------------------------------
// On the CPU the plan is the allocators' measured peaks: the device's (the
// backend's allocator) and the host tier's (backend.host_allocator()).

TEST(PlannerTiers, CpuStepWithACheckpointStorePeaksWhereThePlanSays) {
  ModelConfig config = Preset("tiny-qwen3");
  config.num_hidden_layers = 5;  // 4 inputs stored off the device
  CpuAllocator allocator;
  CpuBackend backend(allocator);
  auto weights = ParameterStore::Create(config, allocator, "weights");
  auto grads = ParameterStore::Create(config, allocator, "gradients");
  ASSERT_TRUE(weights.ok() && grads.ok());
  const ModelTensors w = BindModelTensors(*weights);
  ModelTensors g = BindModelTensors(*grads);
  const std::string dir = ::testing::TempDir() + "/planner_tiers_disk";
  std::filesystem::create_directories(dir);
  for (const int64_t T : {7, 300}) {
    TokenSequence sequence;
    for (int64_t t = 0; t < T; ++t) {
      sequence.input_ids.push_back(static_cast<int32_t>((t * 7919 + 11) % config.vocab_size));
    }
    sequence.labels = sequence.input_ids;
    for (const EngineOptions& options :
         {EngineOptions{BackwardMode::kStream, 32, 48}, EngineOptions{BackwardMode::kStream, 0, 0},
          EngineOptions{BackwardMode::kCheckpoint, 0, 0},
          EngineOptions{BackwardMode::kFull, 0, 0}}) {
      for (CheckpointTier tier :
           {CheckpointTier::kDevice, CheckpointTier::kHost, CheckpointTier::kDisk}) {
        SCOPED_TRACE(absl::StrCat(CheckpointTierName(tier), " ", BackwardModeName(options.mode),
                                  " T=", T, " chunks ", options.chunk_tokens, "/",
                                  options.logits_chunk_tokens));
        std::unique_ptr<CheckpointStore> store;
        if (tier == CheckpointTier::kHost) {
          store = NewHostCheckpointStore(backend);
        } else if (tier == CheckpointTier::kDisk) {
          auto disk = NewDiskCheckpointStore(backend, dir);
          ASSERT_TRUE(disk.ok()) << disk.status();
          store = *std::move(disk);
        }
        Engine engine(config, backend, options);
        engine.set_checkpoint_store(store.get());
        allocator.ResetPeak();
        backend.host_allocator().ResetPeak();
        auto result = SftForwardBackward(engine, w, {sequence}, g);
        ASSERT_TRUE(result.ok()) << result.status();

        PlanRequest r;
        r.config = config;
        r.seq_len = T;
        r.mode = options.mode;
        r.chunk_tokens = options.chunk_tokens;
        r.logits_chunk_tokens = options.logits_chunk_tokens;
        r.optimizer_state = false;  // the test holds weights and gradients only
        r.checkpoint_tier = tier;
        const MemoryPlan plan = *PlanMemory(r);
        EXPECT_EQ(plan.peak_bytes, allocator.peak_bytes()) << SummarizeBreakdown(plan, 20);
        EXPECT_EQ(plan.host_bytes, backend.host_allocator().peak_bytes());
        if (store != nullptr) {
          EXPECT_EQ(plan.host_bytes, store->host_bytes());
          EXPECT_EQ(plan.disk_bytes, store->disk_bytes());
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// The long-context targets: full fine-tuning (AdamW) with the optimizer
// offloaded, host tier, 1.8 TiB of host memory, bf16 on one GPU, the default
// 10% margin on the device and the host: at least 1M tokens on 80 GiB and 2M
// on 141 GB (143771 MiB, as the H200 reports it).

TEST(PlannerTiers, LongContextTargetsOnOneGpu) {
  const int64_t host_memory = *ParseByteSize("1.8TiB");
  const double margin = DefaultSafetyMargin(DeviceKind::kCuda);
  struct Target {
    int64_t memory, tokens;
  };
  for (const std::string model : {"qwen3-8b", "llama3.1-8b"}) {
    for (const Target target : {Target{*ParseByteSize("80GiB"), 1'000'000},
                                Target{*ParseByteSize("143771MiB"), 2'000'000}}) {
      PlanRequest r = Cuda(model, 1, 0, 0);
      r.optimizer_offload = true;
      r.checkpoint_tier = CheckpointTier::kHost;
      const int64_t longest = *MaxSequenceLength(r, target.memory, margin, host_memory, 0);
      std::printf(
          "%s, %s device, host tier, optimizer offloaded, %s host: max T %lld (target %lld)\n",
          model.c_str(), FormatByteSize(target.memory).c_str(), FormatByteSize(host_memory).c_str(),
          static_cast<long long>(longest), static_cast<long long>(target.tokens));
      EXPECT_GE(longest, target.tokens) << model << " on " << FormatByteSize(target.memory);
      // The auto tier reaches the target too (through the host tier).
      r.seq_len = target.tokens;
      auto plan = PlanTiers(r, target.memory, margin, host_memory, 0);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_EQ(plan->checkpoint_tier, CheckpointTier::kHost);
      EXPECT_LE(plan->host_bytes, UsableBytes(host_memory, margin));
    }
  }
}

}  // namespace
}  // namespace sbp
