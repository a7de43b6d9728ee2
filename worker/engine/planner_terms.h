// The planner's bookkeeping: a ledger of named terms, each the sum of
// allocations of given shapes, rounded the way the device's allocator rounds
// them, and the ledgers of the model state and of each phase of a step (see
// planner.h for the phases and the model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "worker/engine/planner.h"

namespace sbp::planner {

struct LedgerTerm {
  std::string name;
  int64_t bytes = 0;          // requested
  int64_t rounded_bytes = 0;  // as the allocator charges them
  std::string detail;
  bool outside_allocator = false;  // CUDA context, library workspaces
};

class Ledger {
 public:
  explicit Ledger(int64_t alignment) : alignment_(alignment) {}

  // `count` allocations of `elements` elements of `element_bytes` each, added
  // to the term `name` (created on first use, in order).
  void Add(absl::string_view name, int64_t count, int64_t elements, int64_t element_bytes);
  // Memory the allocator does not see (counted as is).
  void AddOutside(absl::string_view name, int64_t bytes, std::string detail);
  void SetDetail(absl::string_view name, std::string detail);
  void Append(const Ledger& other);

  int64_t total() const;  // rounded, including memory outside the allocator
  int64_t outside_total() const;
  const std::vector<LedgerTerm>& terms() const { return terms_; }

 private:
  LedgerTerm& Term(absl::string_view name);

  int64_t alignment_;
  std::vector<LedgerTerm> terms_;
};

// Sizes a request implies, resolved once.
struct StepShape {
  // Tokens this rank holds, chunk rows, logits rows (as the engine runs them).
  int64_t T = 0, C = 0, LC = 0;
  int64_t L = 0, H = 0, I = 0, V = 0, q = 0, kv = 0, Hq = 0, Hkv = 0, d = 0;
  // Sequence parallelism: P ranks share a sequence of `sequence` tokens
  // (seq_len rounded up to a multiple of P; T = sequence / P); each runs
  // attention for hq = Hq / P query heads and hkv = max(1, Hkv / P) KV heads.
  // P = 1: sequence = T, hq = Hq, hkv = Hkv.
  int64_t P = 1, sequence = 0, hq = 0, hkv = 0;
  // The longest sequence as requested (before rounding): the caller's token
  // ids, targets and objective scratch cover all of it on every rank.
  int64_t seq_len = 0;
  int64_t N = 1;               // world size
  int64_t act_bytes = 4;       // activations, K/V, logits
  int64_t weight_bytes = 4;    // compute weights
  int64_t gradient_bytes = 4;  // N = 1 gradients
  int64_t alignment = 64;
  // Parameter groups, padded to a multiple of N elements.
  int64_t embed_group = 0, layer_group = 0, final_group = 0;
  // The same groups unpadded (the reference model's store).
  int64_t embed_numel = 0, layer_numel = 0, final_numel = 0;
  bool qk_norm = false, tied = false, keep_all = false, stream = false;
  bool attention_bias = false;  // q/k/v biases (their gradients take column partials)
  bool cuda = false;
  bool reference = false, objective_scratch = false;
  int64_t documents = 0;  // packed documents per sequence (0: none)
  // LoRA: the rank, and the adapter groups (padded to N) that replace the
  // model's groups wherever the trained parameters are counted.
  int64_t lora_r = 0;
  int64_t adapter_layer_numel = 0, adapter_layer_group = 0, adapter_edge_group = 0;
  // Memory tiers: where the layer inputs live, and whether the gradients and
  // optimizer state live in host memory.
  CheckpointTier tier = CheckpointTier::kDevice;
  bool optimizer_offload = false;
  bool optimizer_state = true;
  bool shard_weights = false;  // ZeRO-3 (only with N > 1)
  // Online GRPO's sampling: completions decoded together, and the longest prompt.
  int64_t rollout_sequences = 0, rollout_prompt = 0;
  // The embedding's gradient as a row set: its room in rows (0: dense).
  int64_t embedding_rows = 0;
};

// The sizes of `request` with chunks already chosen (0 in the request: the
// engine's automatic sizes). The request must be valid.
StepShape ShapeOf(const PlanRequest& request);

// Weights, gradients (or shards and cache), optimizer state, reference model
// and, on CUDA, memory outside the allocator: live for the whole step.
Ledger ModelState(const PlanRequest& request, const StepShape& s);

enum class Phase { kLmHead, kLayerBackward, kEmbeddingBackward, kRollout };
absl::string_view PhaseName(Phase phase);  // "lm_head", ...

// What a step holds besides the model state in `phase` (see planner.h).
Ledger PhaseActivations(const StepShape& s, Phase phase);

// Host memory the tiers hold for the whole step (see planner.h): the host
// tier's layer inputs or the disk tier's staging, and the offloaded
// gradients, master weights, moments and their staging. Rounded as the
// device's allocator rounds.
Ledger HostState(const StepShape& s);

// The disk tier's file: (L-1) x T x H x act bytes (0 for the other tiers).
int64_t DiskBytes(const StepShape& s);

// Checkpoint copies of one sequence pass: 2 x (L-1) x T x H x act bytes off
// the device tier, 0 on it.
int64_t CheckpointCopyBytes(const StepShape& s);

// Sequence parallelism: bytes the rank sends through all-to-alls in one
// training pass of one sequence (planner.h); 0 when P = 1.
int64_t AllToAllBytes(const StepShape& s);

// Optimizer offload's copies of a step of one sequence: the trained
// parameters' f32 gradients down and, with optimizer state, their compute
// copies up (0 without offload).
int64_t OptimizerCopyBytes(const StepShape& s);

}  // namespace sbp::planner
