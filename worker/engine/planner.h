// The memory planner: peak bytes per worker of one training step, as a
// breakdown, from the model config and the run's settings — before anything
// is allocated. It models the engine's allocations one by one (the same
// buffers, shapes, lifetimes and allocator rounding as engine.cc,
// layer_buffers.cc, parameter_store.cc and the trainer's optimizer), so on the
// CPU its peak is the allocator's measured peak_bytes(). Phases of a step and
// what is live in each (T tokens, L layers, C = chunk rows, LC = logits rows):
//
//   lm_head             model state + L+1 layer inputs + K/V and chunk buffers
//                       (L sets in full mode, 1 otherwise) + dL/dhidden + the
//                       head's LC x V logits (and, outside stream mode, their
//                       separate LC x V gradient) + objective scratch
//   layer_backward      model state + L layer inputs + the same K/V and chunk
//                       buffers + dL/dhidden + f32 dK/dV [T, Hkv*d] + objective scratch
//   embedding_backward  model state + layer 0's input + dL/dhidden + dK/dV
//                       (+ the embedding's gradient buffer under ZeRO-2)
//
// The forward pass and the no-grad passes of DPO/GRPO hold a subset of the
// lm_head phase, so they never set the peak.
//
// Model state per worker (N = world_size, groups = embed, layer.i, final,
// each padded to a multiple of N elements; w = weight bytes, 2 for bf16;
// g = gradient bytes, w unless gradient_precision says otherwise):
//   N = 1:  weights w*P, gradients g*P, AdamW moments 2*4*P, fp32 master
//           weights 4*P when the weights are bf16 (fp32 weights are their own
//           master).
//   N > 1 (ZeRO-2): full weights (all-gathered in place in their own dtype
//           after each step: bf16 weights move as bf16, never as fp32), fp32
//           gradient shards P/N, master shards (bf16 only) and moments
//           2*4*P/N; a one-layer gradient cache of two layer-sized fp32
//           buffers (double-buffered), an fp32 buffer of the final group
//           during the LM head pass, one of the embedding group during the
//           embedding backward (tied models: from the LM head pass on), and on
//           the CPU Gloo's receive buffer of ceil(largest group / N) fp32
//           (NCCL reduces in place).
// `optimizer_state = false` (backprop only, the StreamBP paper's setup)
// leaves out the moments and master weights. With a row set
// (EmbeddingRowCapacity > 0: N = 1, CPU, untied, full model), the gradients
// leave out the embedding's group and hold `embedding_row_gradient`
// [capacity, H] f32 instead.
//
// Device assumptions. CPU: fp32 only, 64-byte aligned allocations; the
// kernels' per-thread scratch and OpenBLAS buffers live outside the
// allocator and are not counted. CUDA (analytic, not yet checked against a
// GPU): activations, logits and K/V in the compute dtype; RMSNorm and
// attention statistics (rstd, logsumexp) and the dK/dV accumulators in f32;
// gradients in `gradient_precision`; 256-byte allocation rounding; token ids
// and targets on the device; a 32 MiB cuBLAS workspace from the allocator;
// the CUDA context (600 MiB) and NCCL buffers (256 MiB, N > 1), which count
// against the device's memory but not the allocator's; and `kernel_scratch`,
// the largest transient scratch one CUDA op takes in the phase (f32 matmul
// operands rounded to bf16, the attention delta, norm and cross-entropy
// partials; planner_terms.cc).
//
// Memory tiers (worker/engine/offload/; DESIGN.md §8). Where the layer
// inputs kept for the backward live (`checkpoint_tier`; act = the activation
// dtype, [T, H] one layer input):
//   device  as above: L+1 layer inputs in lm_head, L in layer_backward, 1 in
//           embedding_backward; nothing off the device.
//   host    the device holds 2 `layer_input_slots` of [T, H] act in lm_head
//           and layer_backward, none in embedding_backward; host memory
//           (pinned on CUDA) holds `host_layer_inputs`, max(L-1, 0) x [T, H]
//           act, each rounded as the device's allocator rounds (64 bytes on
//           the CPU, 256 on CUDA).
//   disk    the same 2 device slots; a file of (L-1) x T x H x act bytes
//           (`disk_layer_inputs`, disk_bytes); on CUDA host memory holds
//           `disk_staging`, 2 x [T, H] act pinned buffers (on the CPU none).
//   Host and disk copy 2 x (L-1) x T x H x act bytes per sequence pass (each
//   stored input written once and read once): copy_bytes_per_pass.
// Optimizer offload (`optimizer_offload`, any N): the device keeps the compute
// weights (and LoRA's adapter copies) and, for N = 1 too, ZeRO-2's gradient
// buffers: `gradient_cache` (2 x layer group f32), `head_gradient_buffer`
// (the final group f32) in lm_head and, for N = 1, also in layer_backward
// (optimizer_offload.cc frees it at the first layer's Release, once its
// download has run beside that layer's backward), `embedding_gradient_buffer`
// in embedding_backward (tied: from lm_head on), plus Gloo's comm_buffer for
// N > 1 on the CPU; no gradients, shards, master weights or moments. Host
// memory holds `host_gradients` (the trained groups / N, f32; the copies land
// in them directly, pinned on CUDA), `host_master_weights` (f32, P/N, always
// apart from the compute weights) and `host_optimizer_moments` (2 x P/N f32),
// and for bf16 compute weights `host_weight_staging`, what the updated
// masters are cast into for the upload: on one worker 2 buffers of
// min(largest group, 16 Mi) elements, under ZeRO-2 one owned shard of the
// largest group. Without optimizer_state the host holds only the gradients.
// copy_bytes_per_step = P x 4 (the gradients of one backward pass, down) +
// P x weight bytes (the updated weights, up; none without optimizer_state),
// P the trained groups padded as above; a step of k sequences moves
// k x P x 4 gradient bytes down (and, from the second pass on, the partial
// sums up again), which the figure leaves out.
//
// Sequence parallelism (Ulysses; sequence_parallel = P > 1, P divides
// world_size, the model's query heads, and its KV heads or is a multiple of
// them: CheckSequenceParallel). The plan is one rank of a group of P that
// shares each sequence. The whole sequence T (seq_len rounded up to a
// multiple of P) is split into P contiguous pieces of n = T / P rows; around
// attention an all-to-all turns [rows, all heads] into [all rows, this rank's
// heads] and back (hq = Hq / P query heads, hkv = max(1, Hkv / P) KV heads,
// replicated when P > Hkv; d = head_dim, e = activation bytes). A rank holds
// what a single-rank step of n tokens holds (layer inputs or slots [n, H],
// dL/dhidden [n, H], the head's buffers over n rows, chunk activations of
// C <= n rows: chunk_tokens and logits_chunk_tokens are rows per rank, C = n
// outside stream mode; the host and disk tiers store n rows a layer; the
// caller's token ids and targets (CUDA) and the objective's scratch still
// cover the whole seq_len), except the K/V buffers:
//   kv_buffers                 the local K/V (KvBuffers) of one chunk: C rows
//                              (full mode: one set per layer, as before);
//   sequence_parallel_kv       the gathered K and V of this rank's heads, 2 x
//                              [T, hkv, d] e (full mode: a pair per layer;
//                              otherwise one pair), allocated with the K/V;
//   sequence_parallel_chunk    per chunk-activation set, the head-split
//                              attention: q and output [C*P, hq, d] e and the
//                              logsumexp [C*P, hq] f32;
//   sequence_parallel_staging  two all-to-all staging buffers per pass, each
//                              ceil(S / 4) f32 with S = max(C*Hq*d*e,
//                              2*C*P*hkv*d*4), allocated with the chunk
//                              activations and live to the end of the pass
//                              (every phase);
//   sequence_parallel_kv_grads where kv_grads were: dK and dV of this rank's
//                              heads over the whole sequence, 2 x [T, hkv, d]
//                              f32; kv_grads then holds the local chunk's
//                              gradients, 2 x [C, Hkv*d] f32;
//   sequence_parallel_padding  when seq_len is not a multiple of P, the
//                              padded token ids [T] and document offsets
//                              (the padding a document of its own) i32, on
//                              the CPU too, for the whole pass.
// Model state (weights, ZeRO-2 shards over all world_size ranks, optimizer
// offload, LoRA) is unchanged. all_to_all_bytes_per_pass is what the rank
// sends to the other P - 1 ranks in one training pass of one sequence
// (forward and backward; UlyssesAttention::sent_bytes), (P - 1) / P of what
// its all-to-alls carry: per layer the forward carries q out and the
// attention output back (2 n Hq d e bytes) and K and V to the head owners
// (2 n P hkv d e); the backward repeats that outside full mode (it
// recomputes K/V and each chunk's attention), carries dout out and dq back
// (2 n Hq d e) and the f32 gradients of the gathered K/V back (2 T hkv d 4).
// The no-grad passes of DPO/GRPO add a forward's worth each, which the
// figure leaves out.
//
// ZeRO-3 (shard_weights, N > 1; worker/dist/sharded_weights.h): `weights`
// gives way to `weight_shards` (each group / N in the compute dtype) and
// `gathered_layer_weights`, two layer-group buffers (min(2, L)) kept from
// the first pass on; the lm_head phase adds `gathered_edge_weights`, the
// final group (and, tied, the embedding group) gathered for the head. The
// embedding's gather at the start of a pass is no larger than the final
// group's, so it never sets the peak.
//
// Packed sequences (packed_documents > 1) hold the same buffers as one
// sequence of seq_len tokens: K/V, chunks and logits do not depend on where
// documents start, so packing changes time (attention within documents), not
// memory; the document offsets (i32 [documents + 1]) are host memory on the
// CPU and sit beside the token ids on CUDA.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/dtype.h"
#include "worker/engine/engine.h"
#include "worker/engine/lora_options.h"
#include "worker/engine/offload/checkpoint_tier.h"
#include "worker/model/model_config.h"

namespace sbp {

enum class PlanObjective { kSft, kDpo, kGrpo };

absl::string_view PlanObjectiveName(PlanObjective objective);  // "sft", "dpo", "grpo"
absl::StatusOr<PlanObjective> ParsePlanObjective(absl::string_view text);

struct PlanRequest {
  ModelConfig config;
  int64_t seq_len = 0;  // tokens of the longest sequence
  BackwardMode mode = BackwardMode::kStream;
  // Rows per query chunk / logits chunk; 0: the engine's automatic sizes
  // (PlanAutoChunks chooses instead when given the memory).
  int64_t chunk_tokens = 0;
  int64_t logits_chunk_tokens = 0;
  DType precision = DType::kF32;  // compute dtype of weights and activations: f32 or bf16
  // Dtype of the full gradients with world_size 1; nullopt: `precision`.
  // (ZeRO-2 shards and its cache are always f32.)
  std::optional<DType> gradient_precision;
  int64_t world_size = 1;
  PlanObjective objective = PlanObjective::kSft;
  // A frozen reference model (DPO; GRPO with beta > 0). nullopt: DPO and GRPO have one.
  std::optional<bool> reference_model;
  DeviceKind device = DeviceKind::kCpu;
  bool optimizer_state = true;  // false: backprop only (no moments, no master weights)
  // LoRA (lora.r > 0): the weights are a frozen base; gradients, master
  // weights, moments and the ZeRO-2 cache cover only the adapters (groups of
  // the adapter layout: no tensor in embed and final), whose compute copy is
  // `adapter_weights`; each chunk set adds three [C, r] buffers and the step
  // a [max(H, head_dim)] f32 sink for the frozen norms' weight gradients.
  LoraOptions lora;
  // Documents packed into each sequence (0 or 1: none; at most seq_len count).
  int64_t packed_documents = 0;
  // Where the layer inputs live (see above). PlanMemory and PlanAutoChunks
  // plan the tier given; PlanTiers tries them all.
  CheckpointTier checkpoint_tier = CheckpointTier::kDevice;
  // fp32 gradients, master weights and AdamW moments in host memory, the
  // optimizer step on the CPU (see above).
  bool optimizer_offload = false;
  // Ranks of a sequence-parallel group (Ulysses, see above): the plan is one
  // rank's; seq_len stays the whole sequence. 1: none.
  int64_t sequence_parallel = 1;
  // ZeRO-3 (world_size > 1): the compute weights sharded too, gathered a
  // group at a time (see above).
  bool shard_weights = false;
  // Online GRPO's sampling phase (worker/engine/decode/), before the
  // training passes of each step: `rollout_sequences` completions decoded
  // together, each with a KV cache of seq_len rows, prompts of at most
  // `rollout_prompt_tokens`. 0: none. The caches are freed before training,
  // so the peak is the larger phase ("rollout" when it is).
  int64_t rollout_sequences = 0;
  int64_t rollout_prompt_tokens = 0;
  // The embedding's gradient as a row set (kernels/cpu/embedding_rows.h):
  // the sequences (of at most seq_len tokens) one step's passes feed the
  // embedding backward; > 0 reserves room for their tokens' rows for the
  // whole run in place of the dense [V, H] gradient (the optimizer reads the
  // rows; no dense table is made), where EmbeddingRowCapacity allows. 0:
  // dense.
  int64_t embedding_row_sequences = 0;
};

// The row set's room in rows: embedding_row_sequences x seq_len, or 0 (the
// dense gradient) where the row set does not apply — CUDA, world_size > 1
// (ZeRO-2 reduce-scatters the group dense), optimizer offload, LoRA, tied
// embeddings — or would be no smaller than the dense table (as many tokens
// as the vocabulary).
int64_t EmbeddingRowCapacity(const PlanRequest& request);

// One named share of the peak.
struct MemoryTerm {
  std::string name;    // "weights", "layer_inputs", ...
  int64_t bytes = 0;   // requested bytes (rounding is its own term)
  std::string detail;  // shapes, e.g. "37 x [8192, 4096] bf16"
};

struct MemoryPlan {
  int64_t peak_bytes = 0;
  std::string peak_phase;             // "lm_head", "layer_backward", "embedding_backward", ...
  std::vector<MemoryTerm> breakdown;  // live at the peak; sums to peak_bytes
  int64_t seq_len = 0;                // the whole sequence (as requested)
  // Sequence parallelism: the group's ranks, and the rows each holds
  // (ceil(seq_len / P); seq_len when P = 1).
  int64_t sequence_parallel = 1;
  int64_t local_tokens = 0;
  int64_t chunk_tokens = 0;  // as the engine runs them (clamped to local_tokens)
  int64_t logits_chunk_tokens = 0;
  int64_t model_state_bytes = 0;  // the part that does not depend on seq_len
  // Memory the device holds outside the allocator (the CUDA context, NCCL);
  // counted in peak_bytes. The allocator's own peak_bytes() is the difference.
  int64_t device_overhead_bytes = 0;
  int64_t allocator_peak_bytes() const { return peak_bytes - device_overhead_bytes; }

  // Off the device (the memory tiers; all 0 / empty for the device tier
  // without optimizer offload).
  CheckpointTier checkpoint_tier = CheckpointTier::kDevice;
  int64_t host_bytes = 0;                  // host memory the tiers hold for the whole step
  std::vector<MemoryTerm> host_breakdown;  // sums to host_bytes (rounding its own term)
  int64_t disk_bytes = 0;                  // the disk tier's file
  int64_t copy_bytes_per_pass = 0;         // checkpoint copies of one sequence pass
  int64_t copy_bytes_per_step = 0;         // optimizer offload: gradients down + weights up
  // Sequence parallelism: bytes this rank sends through all-to-alls in one
  // training pass (forward + backward) of one sequence; 0 when P = 1.
  int64_t all_to_all_bytes_per_pass = 0;

  // Bytes of the term `name` at the peak (0 when absent).
  int64_t Term(absl::string_view name) const;
  // Bytes of the host term `name` (0 when absent).
  int64_t HostTerm(absl::string_view name) const;
};

// Checks the request (positive sizes, precision, device) with errors naming the field.
absl::Status ValidatePlanRequest(const PlanRequest& request);

// Whether a model can run with `sequence_parallel` ranks sharing a sequence:
// P divides the query heads, and the KV heads are a multiple of P or divide
// it (P above the KV heads replicates them, as Ulysses does). InvalidArgument
// naming `field`, P and both head counts otherwise (or when P < 1).
absl::Status CheckSequenceParallel(const ModelConfig& config, int64_t sequence_parallel,
                                   absl::string_view field = "resources.sequence_parallel");

// The peak of one training step with the request's chunk sizes.
absl::StatusOr<MemoryPlan> PlanMemory(const PlanRequest& request);

// The smallest chunk sizes `auto` considers (fewer rows than this make the
// step slow for little memory); a request's fixed sizes are kept.
inline constexpr int64_t kMinAutoChunkTokens = 64;

// The plan with the smallest automatic chunks: the least memory the request
// can run in (what admission requires of a worker).
absl::StatusOr<MemoryPlan> PlanMinimum(const PlanRequest& request);

// Default share of a worker's memory kept free for what the model does not
// see: 5% on the CPU, 10% on CUDA (fragmentation, library scratch).
double DefaultSafetyMargin(DeviceKind device);

// Bytes a plan may use on a worker of `memory_bytes`: memory * (1 - margin).
int64_t UsableBytes(int64_t memory_bytes, double safety_margin);

// `auto` chunk sizes: the largest chunk_tokens and logits_chunk_tokens (the
// ones the request leaves at 0; powers of two from kMinAutoChunkTokens up to
// seq_len, grown together, the smaller first) whose predicted peak fits in
// UsableBytes(memory_bytes, safety_margin). Outside stream mode the engine
// runs whole sequences, so only the fit is checked. ResourceExhausted with
// the smallest plan's numbers when nothing fits.
absl::StatusOr<MemoryPlan> PlanAutoChunks(const PlanRequest& request, int64_t memory_bytes,
                                          double safety_margin);

// The longest sequence (request.seq_len ignored) that PlanAutoChunks fits in
// `memory_bytes`; 0 when not even one token fits. With sequence parallelism
// it is the whole sequence of the group (each rank holding 1/P of it).
absl::StatusOr<int64_t> MaxSequenceLength(const PlanRequest& request, int64_t memory_bytes,
                                          double safety_margin);

// The plan of `request`'s checkpoint_tier with auto chunks (PlanAutoChunks)
// that also fits the host and the disk: host_bytes within
// UsableBytes(host_memory, safety_margin) and disk_bytes within
// UsableBytes(disk_bytes, safety_margin); 0 leaves that resource unchecked
// (unlimited). ResourceExhausted naming the short resource (device, host or
// disk) with its numbers.
absl::StatusOr<MemoryPlan> PlanTier(const PlanRequest& request, int64_t device_memory,
                                    double safety_margin, int64_t host_memory, int64_t disk_bytes);

// The fastest checkpoint tier that fits (request.checkpoint_tier ignored):
// device, then host, then disk, each with its auto chunks (PlanTier).
// host_memory 0: unlimited; disk_bytes 0: no disk (the disk tier is not
// tried). ResourceExhausted naming, per tier tried, what is short (device,
// host or disk) with the numbers when none fits.
absl::StatusOr<MemoryPlan> PlanTiers(const PlanRequest& request, int64_t device_memory,
                                     double safety_margin, int64_t host_memory, int64_t disk_bytes);

// The longest sequence (request.seq_len ignored) that PlanTier fits in
// `device_memory`, `host_memory` and `disk_bytes` (0: unlimited) with the
// request's checkpoint_tier; 0 when not even one token fits.
absl::StatusOr<int64_t> MaxSequenceLength(const PlanRequest& request, int64_t device_memory,
                                          double safety_margin, int64_t host_memory,
                                          int64_t disk_bytes);

// "weights 15.3 GiB, gradients 15.3 GiB, layer_inputs 2.1 GiB, ..." (largest
// first, at most `max_terms`, the rest summed as "other").
std::string SummarizeBreakdown(const MemoryPlan& plan, int max_terms = 6);

}  // namespace sbp
