#include "worker/engine/planner.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "common/status_macros.h"
#include "worker/engine/lora_store.h"
#include "worker/engine/planner_terms.h"

namespace sbp {
namespace {

// Longest sequence MaxSequenceLength tries: 64M tokens.
constexpr int64_t kMaxPlanTokens = int64_t{1} << 26;

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

MemoryPlan Assemble(const PlanRequest& request) {
  using planner::Phase;
  const planner::StepShape s = planner::ShapeOf(request);
  const planner::Ledger state = planner::ModelState(request, s);
  Phase peak_phase = Phase::kLmHead;
  planner::Ledger peak(s.alignment);
  int64_t peak_total = -1;
  for (Phase phase :
       {Phase::kLmHead, Phase::kLayerBackward, Phase::kEmbeddingBackward, Phase::kRollout}) {
    if (phase == Phase::kRollout && s.rollout_sequences == 0) continue;
    planner::Ledger ledger = planner::PhaseActivations(s, phase);
    if (ledger.total() > peak_total) {
      peak_total = ledger.total();
      peak = std::move(ledger);
      peak_phase = phase;
    }
  }
  planner::Ledger all = state;
  all.Append(peak);

  MemoryPlan plan;
  plan.peak_bytes = all.total();
  plan.peak_phase = std::string(planner::PhaseName(peak_phase));
  plan.seq_len = request.seq_len;
  plan.sequence_parallel = s.P;
  plan.local_tokens = s.T;
  plan.chunk_tokens = s.C;
  plan.logits_chunk_tokens = s.LC;
  plan.model_state_bytes = state.total();
  plan.device_overhead_bytes = all.outside_total();
  int64_t requested = 0;
  for (const planner::LedgerTerm& t : all.terms()) {
    plan.breakdown.push_back({t.name, t.bytes, t.detail});
    requested += t.bytes;
  }
  plan.breakdown.push_back({"allocator_rounding", plan.peak_bytes - requested,
                            absl::StrCat(s.alignment, "-byte allocation granularity")});

  plan.checkpoint_tier = s.tier;
  const planner::Ledger host = planner::HostState(s);
  plan.host_bytes = host.total();
  int64_t host_requested = 0;
  for (const planner::LedgerTerm& t : host.terms()) {
    plan.host_breakdown.push_back({t.name, t.bytes, t.detail});
    host_requested += t.bytes;
  }
  if (!host.terms().empty()) {
    plan.host_breakdown.push_back({"allocator_rounding", plan.host_bytes - host_requested,
                                   absl::StrCat(s.alignment, "-byte allocation granularity")});
  }
  plan.disk_bytes = planner::DiskBytes(s);
  plan.copy_bytes_per_pass = planner::CheckpointCopyBytes(s);
  plan.copy_bytes_per_step = planner::OptimizerCopyBytes(s);
  plan.all_to_all_bytes_per_pass = planner::AllToAllBytes(s);
  return plan;
}

// Rows each rank of a sequence-parallel group holds (the whole sequence when
// there is none).
int64_t LocalTokens(const PlanRequest& request) {
  const int64_t P = std::max<int64_t>(request.sequence_parallel, 1);
  return (request.seq_len + P - 1) / P;
}

std::string Percent(double fraction) { return absl::StrCat(std::round(fraction * 1000) / 10, "%"); }

absl::Status DoesNotFit(const PlanRequest& request, const MemoryPlan& plan, int64_t memory_bytes,
                        double margin) {
  std::string chunks;
  if (request.mode == BackwardMode::kStream) {
    chunks = absl::StrCat(" with chunk_tokens ", plan.chunk_tokens, " and logits_chunk_tokens ",
                          plan.logits_chunk_tokens);
  }
  const std::string split = plan.sequence_parallel > 1
                                ? absl::StrCat(" (", plan.local_tokens, " tokens on each of ",
                                               plan.sequence_parallel, " sequence-parallel ranks)")
                                : std::string();
  return absl::ResourceExhaustedError(absl::StrCat(
      BackwardModeName(request.mode), " mode at seq_len ", plan.seq_len, split, " needs ",
      FormatByteSize(plan.peak_bytes), " (", plan.peak_bytes, " bytes) per worker", chunks, " (",
      SummarizeBreakdown(plan), "), but a worker with ", FormatByteSize(memory_bytes), " has ",
      FormatByteSize(UsableBytes(memory_bytes, margin)), " usable after the ", Percent(margin),
      " safety margin"));
}

// Chunk sizes `auto` tries for `tokens`: 64, 128, ... (powers of two below
// tokens), then tokens itself; just `fixed` (clamped) when the request fixes it.
std::vector<int64_t> Candidates(int64_t tokens, int64_t fixed) {
  if (fixed > 0) return {std::min(fixed, tokens)};
  std::vector<int64_t> out;
  for (int64_t c = kMinAutoChunkTokens; c < tokens; c *= 2) out.push_back(c);
  out.push_back(tokens);
  return out;
}

// What does not fit of `plan` in the host memory and disk given (0: unlimited),
// one clause per short resource.
std::vector<std::string> OffDeviceShortfalls(const MemoryPlan& plan, int64_t host_memory,
                                             int64_t disk_bytes, double margin) {
  std::vector<std::string> out;
  if (host_memory > 0 && plan.host_bytes > UsableBytes(host_memory, margin)) {
    MemoryPlan host_only;
    host_only.breakdown = plan.host_breakdown;
    out.push_back(absl::StrCat(
        "host memory is short: ", CheckpointTierName(plan.checkpoint_tier), " tier at seq_len ",
        plan.seq_len, " needs ", FormatByteSize(plan.host_bytes), " (", plan.host_bytes,
        " bytes) of host memory (", SummarizeBreakdown(host_only), "), but the host's ",
        FormatByteSize(host_memory), " has ", FormatByteSize(UsableBytes(host_memory, margin)),
        " usable after the ", Percent(margin), " safety margin"));
  }
  if (disk_bytes > 0 && plan.disk_bytes > UsableBytes(disk_bytes, margin)) {
    out.push_back(absl::StrCat(
        "the disk is short: disk tier at seq_len ", plan.seq_len, " needs a file of ",
        FormatByteSize(plan.disk_bytes), " (", plan.disk_bytes, " bytes), but the disk's ",
        FormatByteSize(disk_bytes), " has ", FormatByteSize(UsableBytes(disk_bytes, margin)),
        " usable after the ", Percent(margin), " safety margin"));
  }
  return out;
}

// The longest tokens in [1, kMaxPlanTokens] for which `fits` holds (0: none);
// `fits` must be monotone.
template <typename Fits>
int64_t LongestFitting(Fits fits) {
  if (!fits(1)) return 0;
  // Invariant: fits(lo), !fits(hi) (or hi past the search range).
  int64_t lo = 1, hi = 1024;
  while (hi <= kMaxPlanTokens && fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  if (hi > kMaxPlanTokens) {
    if (fits(kMaxPlanTokens)) return kMaxPlanTokens;
    hi = kMaxPlanTokens;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

absl::Status CheckMemory(int64_t memory_bytes, double safety_margin) {
  if (memory_bytes <= 0) {
    return FieldError("memory",
                      absl::StrCat("must be a positive number of bytes (got ", memory_bytes, ")"));
  }
  if (!(safety_margin >= 0 && safety_margin < 1)) {
    return FieldError("safety_margin", absl::StrCat("must be in [0, 1) (got ", safety_margin, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view PlanObjectiveName(PlanObjective objective) {
  switch (objective) {
    case PlanObjective::kSft:
      return "sft";
    case PlanObjective::kDpo:
      return "dpo";
    case PlanObjective::kGrpo:
      return "grpo";
  }
  return "?";
}

absl::StatusOr<PlanObjective> ParsePlanObjective(absl::string_view text) {
  if (text == "sft") return PlanObjective::kSft;
  if (text == "dpo") return PlanObjective::kDpo;
  if (text == "grpo") return PlanObjective::kGrpo;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown objective '", text, "' (expected sft, dpo or grpo)"));
}

int64_t MemoryPlan::Term(absl::string_view name) const {
  for (const MemoryTerm& t : breakdown) {
    if (t.name == name) return t.bytes;
  }
  return 0;
}

int64_t MemoryPlan::HostTerm(absl::string_view name) const {
  for (const MemoryTerm& t : host_breakdown) {
    if (t.name == name) return t.bytes;
  }
  return 0;
}

int64_t EmbeddingRowCapacity(const PlanRequest& r) {
  const bool applies = r.device == DeviceKind::kCpu && r.world_size == 1 && !r.optimizer_offload &&
                       !r.lora.enabled() && !r.config.tie_word_embeddings;
  if (!applies || r.embedding_row_sequences <= 0 || r.seq_len <= 0) return 0;
  // As many tokens as the vocabulary or more: the table is no larger (the
  // quotient also keeps the product below from overflowing).
  if (r.embedding_row_sequences > r.config.vocab_size / r.seq_len) return 0;
  const int64_t rows = r.embedding_row_sequences * r.seq_len;
  return rows < r.config.vocab_size ? rows : 0;
}

absl::Status ValidatePlanRequest(const PlanRequest& r) {
  RETURN_IF_ERROR(ValidateModelConfig(r.config, "model config"));
  if (r.seq_len <= 0) {
    return FieldError("seq_len",
                      absl::StrCat("must be a positive number of tokens (got ", r.seq_len, ")"));
  }
  if (r.seq_len > kMaxPlanTokens) {
    return FieldError("seq_len",
                      absl::StrCat("must be at most ", kMaxPlanTokens, " (got ", r.seq_len, ")"));
  }
  if (r.packed_documents < 0) {
    return FieldError("packed_documents", absl::StrCat("must be 0 or a number of documents (got ",
                                                       r.packed_documents, ")"));
  }
  if (r.chunk_tokens < 0) {
    return FieldError("chunk_tokens",
                      absl::StrCat("must be positive or 0 for auto (got ", r.chunk_tokens, ")"));
  }
  if (r.logits_chunk_tokens < 0) {
    return FieldError("logits_chunk_tokens", absl::StrCat("must be positive or 0 for auto (got ",
                                                          r.logits_chunk_tokens, ")"));
  }
  if (r.precision != DType::kF32 && r.precision != DType::kBF16) {
    return FieldError("precision", "must be fp32 or bf16");
  }
  if (r.device == DeviceKind::kCpu && r.precision != DType::kF32) {
    return FieldError("precision", "the CPU backend computes in fp32; bf16 needs device cuda");
  }
  if (r.world_size < 1 || r.world_size > 1 << 20) {
    return FieldError("world_size",
                      absl::StrCat("must be between 1 and ", 1 << 20, " (got ", r.world_size, ")"));
  }
  if (r.lora.enabled()) RETURN_IF_ERROR(ValidateLoraOptions(r.lora));
  if (r.sequence_parallel < 1 || r.world_size % r.sequence_parallel != 0) {
    return FieldError("sequence_parallel",
                      absl::StrCat("must be a positive divisor of world_size (", r.world_size,
                                   ") (got ", r.sequence_parallel, ")"));
  }
  RETURN_IF_ERROR(CheckSequenceParallel(r.config, r.sequence_parallel, "sequence_parallel"));
  if (r.shard_weights && r.world_size == 1) {
    return FieldError("shard_weights", "ZeRO-3 shards the weights over workers: world_size > 1");
  }
  if (r.shard_weights && r.lora.enabled()) {
    return FieldError("shard_weights", "ZeRO-3 is not supported with LoRA");
  }
  if (r.embedding_row_sequences < 0) {
    return FieldError("embedding_row_sequences",
                      absl::StrCat("must be 0 (dense) or a number of sequences (got ",
                                   r.embedding_row_sequences, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckSequenceParallel(const ModelConfig& config, int64_t sequence_parallel,
                                   absl::string_view field) {
  const int64_t P = sequence_parallel, Hq = config.num_attention_heads,
                Hkv = config.num_key_value_heads;
  const bool fits = P >= 1 && Hq > 0 && Hkv > 0 && Hq % P == 0 && (Hkv % P == 0 || P % Hkv == 0);
  if (fits) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": ", P,
      " ranks cannot share the model's attention heads: sequence parallelism needs a positive "
      "divisor of its ",
      Hq, " query heads (num_attention_heads) that also divides, or is a multiple of, its ", Hkv,
      " KV heads (num_key_value_heads)"));
}

absl::StatusOr<MemoryPlan> PlanMemory(const PlanRequest& request) {
  RETURN_IF_ERROR(ValidatePlanRequest(request));
  return Assemble(request);
}

absl::StatusOr<MemoryPlan> PlanMinimum(const PlanRequest& request) {
  RETURN_IF_ERROR(ValidatePlanRequest(request));
  PlanRequest smallest = request;
  if (smallest.chunk_tokens == 0) smallest.chunk_tokens = kMinAutoChunkTokens;
  if (smallest.logits_chunk_tokens == 0) smallest.logits_chunk_tokens = kMinAutoChunkTokens;
  return Assemble(smallest);
}

double DefaultSafetyMargin(DeviceKind device) { return device == DeviceKind::kCuda ? 0.10 : 0.05; }

int64_t UsableBytes(int64_t memory_bytes, double safety_margin) {
  return static_cast<int64_t>(std::floor(static_cast<double>(memory_bytes) * (1 - safety_margin)));
}

absl::StatusOr<MemoryPlan> PlanAutoChunks(const PlanRequest& request, int64_t memory_bytes,
                                          double safety_margin) {
  RETURN_IF_ERROR(ValidatePlanRequest(request));
  RETURN_IF_ERROR(CheckMemory(memory_bytes, safety_margin));
  const int64_t usable = UsableBytes(memory_bytes, safety_margin);
  // Chunks are rows of this rank's piece of the sequence.
  const int64_t T = LocalTokens(request);
  const std::vector<int64_t> chunks = Candidates(T, request.chunk_tokens);
  const std::vector<int64_t> logits = Candidates(T, request.logits_chunk_tokens);
  PlanRequest trial = request;
  auto plan_at = [&](size_t c, size_t l) {
    trial.chunk_tokens = chunks[c];
    trial.logits_chunk_tokens = logits[l];
    return Assemble(trial);
  };
  size_t c = 0, l = 0;
  MemoryPlan best = plan_at(c, l);
  if (best.peak_bytes > usable) return DoesNotFit(request, best, memory_bytes, safety_margin);
  if (request.mode != BackwardMode::kStream) return best;  // whole sequences: nothing to choose
  // Grow the smaller of the two sizes first (query chunks on ties) while it fits.
  for (;;) {
    const bool chunk_first = chunks[c] <= logits[l];
    bool grew = false;
    for (int pass = 0; pass < 2 && !grew; ++pass) {
      const bool grow_chunk = (pass == 0) == chunk_first;
      const size_t nc = grow_chunk ? c + 1 : c, nl = grow_chunk ? l : l + 1;
      if (nc >= chunks.size() || nl >= logits.size()) continue;
      MemoryPlan next = plan_at(nc, nl);
      if (next.peak_bytes > usable) continue;
      c = nc;
      l = nl;
      best = std::move(next);
      grew = true;
    }
    if (!grew) break;
  }
  return best;
}

absl::StatusOr<int64_t> MaxSequenceLength(const PlanRequest& request, int64_t memory_bytes,
                                          double safety_margin) {
  PlanRequest trial = request;
  trial.seq_len = 1;
  RETURN_IF_ERROR(ValidatePlanRequest(trial));
  RETURN_IF_ERROR(CheckMemory(memory_bytes, safety_margin));
  return LongestFitting([&](int64_t tokens) {
    trial.seq_len = tokens;
    return PlanAutoChunks(trial, memory_bytes, safety_margin).ok();
  });
}

absl::StatusOr<MemoryPlan> PlanTier(const PlanRequest& request, int64_t device_memory,
                                    double safety_margin, int64_t host_memory, int64_t disk_bytes) {
  RETURN_IF_ERROR(ValidatePlanRequest(request));
  RETURN_IF_ERROR(CheckMemory(device_memory, safety_margin));
  if (host_memory < 0) {
    return FieldError(
        "host_memory",
        absl::StrCat("must be 0 (unlimited) or a number of bytes (got ", host_memory, ")"));
  }
  if (disk_bytes < 0) {
    return FieldError("disk_bytes", absl::StrCat("must be 0 (unlimited) or a number of bytes (got ",
                                                 disk_bytes, ")"));
  }
  const std::string tier = absl::StrCat(CheckpointTierName(request.checkpoint_tier), " tier: ");
  absl::StatusOr<MemoryPlan> plan = PlanAutoChunks(request, device_memory, safety_margin);
  std::vector<std::string> short_of;
  if (!plan.ok()) {
    if (plan.status().code() != absl::StatusCode::kResourceExhausted) return plan.status();
    short_of.push_back(absl::StrCat("the device is short: ", plan.status().message()));
  }
  // Host memory and the file do not depend on the chunk sizes.
  const MemoryPlan off_device = plan.ok() ? *plan : Assemble(request);
  for (std::string& clause :
       OffDeviceShortfalls(off_device, host_memory, disk_bytes, safety_margin)) {
    short_of.push_back(std::move(clause));
  }
  if (short_of.empty()) return plan;
  return absl::ResourceExhaustedError(absl::StrCat(tier, absl::StrJoin(short_of, "; ")));
}

absl::StatusOr<MemoryPlan> PlanTiers(const PlanRequest& request, int64_t device_memory,
                                     double safety_margin, int64_t host_memory,
                                     int64_t disk_bytes) {
  std::vector<CheckpointTier> tiers = {CheckpointTier::kDevice, CheckpointTier::kHost};
  if (disk_bytes > 0) tiers.push_back(CheckpointTier::kDisk);
  std::vector<std::string> misses;
  for (CheckpointTier tier : tiers) {
    PlanRequest trial = request;
    trial.checkpoint_tier = tier;
    absl::StatusOr<MemoryPlan> plan =
        PlanTier(trial, device_memory, safety_margin, host_memory, disk_bytes);
    if (plan.ok() || plan.status().code() != absl::StatusCode::kResourceExhausted) return plan;
    misses.push_back(std::string(plan.status().message()));
  }
  if (disk_bytes == 0) misses.push_back("disk tier: not tried (no disk given)");
  return absl::ResourceExhaustedError(
      absl::StrCat("no checkpoint tier fits: ", absl::StrJoin(misses, " | ")));
}

absl::StatusOr<int64_t> MaxSequenceLength(const PlanRequest& request, int64_t device_memory,
                                          double safety_margin, int64_t host_memory,
                                          int64_t disk_bytes) {
  PlanRequest trial = request;
  trial.seq_len = 1;
  RETURN_IF_ERROR(ValidatePlanRequest(trial));
  RETURN_IF_ERROR(CheckMemory(device_memory, safety_margin));
  absl::Status bad_input;
  const int64_t longest = LongestFitting([&](int64_t tokens) {
    trial.seq_len = tokens;
    absl::StatusOr<MemoryPlan> plan =
        PlanTier(trial, device_memory, safety_margin, host_memory, disk_bytes);
    if (!plan.ok() && plan.status().code() != absl::StatusCode::kResourceExhausted) {
      bad_input.Update(plan.status());
    }
    return plan.ok();
  });
  RETURN_IF_ERROR(bad_input);
  return longest;
}

std::string SummarizeBreakdown(const MemoryPlan& plan, int max_terms) {
  std::vector<MemoryTerm> terms = plan.breakdown;
  std::stable_sort(terms.begin(), terms.end(),
                   [](const MemoryTerm& a, const MemoryTerm& b) { return a.bytes > b.bytes; });
  std::vector<std::string> parts;
  int64_t other = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    if (terms[i].bytes <= 0) continue;
    if (static_cast<int>(parts.size()) < max_terms) {
      parts.push_back(absl::StrCat(terms[i].name, " ", FormatByteSize(terms[i].bytes)));
    } else {
      other += terms[i].bytes;
    }
  }
  if (other > 0) parts.push_back(absl::StrCat("other ", FormatByteSize(other)));
  return absl::StrJoin(parts, ", ");
}

}  // namespace sbp
