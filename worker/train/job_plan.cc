#include "worker/train/job_plan.h"

namespace sbp {
namespace {

// Sequences (of at most seq_len tokens each) one step's passes can feed the
// embedding backward on one rank: SFT's sequences (packed or not), DPO's
// chosen and rejected sequences, online GRPO's completions; 0 (unknown) for
// offline GRPO, whose groups come with the data.
int64_t StepSequenceBound(const JobSpec& spec) {
  const int64_t ranks = spec.resources.world_size / spec.resources.sequence_parallel;
  const int64_t examples = (spec.train.sequences_per_step + ranks - 1) / ranks;
  int64_t sequences = 0;
  switch (spec.objective) {
    case Objective::kSft:
      sequences = examples;
      break;
    case Objective::kDpo:
      sequences = 2 * examples;
      break;
    case Objective::kGrpo:
      sequences = spec.grpo.online() ? examples * spec.grpo.rollout.group_size : 0;
      break;
  }
  return sequences;
}

}  // namespace

PlanRequest PlanRequestForSpec(const JobSpec& spec, const ModelConfig& config) {
  PlanRequest r;
  r.config = config;
  r.seq_len = spec.seq_len;
  r.mode = spec.streambp.mode;
  r.chunk_tokens = spec.streambp.chunk_tokens;
  r.logits_chunk_tokens = spec.streambp.logits_chunk_tokens;
  r.precision = spec.train.precision == Precision::kBf16 ? DType::kBF16 : DType::kF32;
  // The trainer keeps f32 gradients whatever the compute precision
  // (optimizer_state.cc), and the CUDA embedding backward needs them.
  r.gradient_precision = DType::kF32;
  r.world_size = spec.resources.world_size;
  // One rank of a sequence-parallel group: 1/P of each sequence's tokens,
  // ZeRO-2 over all world_size ranks.
  r.sequence_parallel = spec.resources.sequence_parallel;
  switch (spec.objective) {
    case Objective::kSft:
      r.objective = PlanObjective::kSft;
      break;
    case Objective::kDpo:
      r.objective = PlanObjective::kDpo;
      break;
    case Objective::kGrpo:
      r.objective = PlanObjective::kGrpo;
      break;
  }
  r.reference_model = !ReferenceModelDir(spec).empty() && !ReferenceIsLoraBase(spec);
  r.device = spec.resources.device;
  r.optimizer_state = true;
  r.optimizer_offload = spec.train.optimizer_offload;
  r.shard_weights = spec.train.zero_stage == 3;
  if (spec.grpo.online()) {
    // Each data-parallel rank decodes its share of the step's prompts, every
    // completion of their groups at once.
    const int64_t groups = spec.resources.world_size / spec.resources.sequence_parallel;
    const int64_t prompts = (spec.train.sequences_per_step + groups - 1) / groups;
    r.rollout_sequences = prompts * spec.grpo.rollout.group_size;
    r.rollout_prompt_tokens = spec.seq_len - spec.grpo.rollout.max_new_tokens;
  }
  // `auto` plans the device tier until the worker resolves it
  // (ChooseCheckpointTier), which then sets the tier it chose.
  r.checkpoint_tier = spec.streambp.offload.checkpoints.value_or(CheckpointTier::kDevice);
  r.lora = spec.lora;
  // Packing: at most one document per token (the offsets' largest size).
  if (spec.data_packing) r.packed_documents = spec.seq_len;
  r.embedding_row_sequences = StepSequenceBound(spec);
  return r;
}

std::string ReferenceModelDir(const JobSpec& spec) {
  if (spec.objective == Objective::kDpo) return spec.dpo.reference;
  if (spec.objective == Objective::kGrpo && spec.grpo.beta > 0) return spec.grpo.reference;
  return "";
}

bool ReferenceIsLoraBase(const JobSpec& spec) {
  return spec.lora.enabled() && ReferenceModelDir(spec) == spec.model;
}

}  // namespace sbp
