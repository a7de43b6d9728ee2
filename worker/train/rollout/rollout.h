// Online GRPO's sampling phase: for a step's prompts, `group_size`
// completions each from the current weights (worker/engine/decode/), scored
// by the job's reward (reward.h), as the groups GRPO trains on
// (objectives/grpo.h).
//
// Determinism: completion c of the prompt at dataset index i in step s is
// drawn from SamplerStream(train.seed, s, i, c), so the tokens do not depend
// on the batch, the rank that samples them or a restart: a resumed run
// (whose checkpoint holds the step and the data cursor) samples exactly the
// completions the uninterrupted run did.
//
// Ratios: the completions carry no old log-probs, so GRPO's old policy is
// the policy itself, detached (one update per rollout): the first and only
// update's ratio is exactly 1, as TRL with one iteration per generation.
// The sampler's own fp32 log-probs (temperature 1) are what `sbp generate`
// writes.
//
// Memory: the step's KV caches live only inside Sample and are freed before
// the training passes run.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/decode/generation.h"
#include "worker/model/tokenizer_decoder.h"
#include "worker/train/dataset.h"
#include "worker/train/job_spec.h"
#include "worker/train/rollout/reward.h"

namespace sbp {

// One step's sampling on this rank (sums, so ranks can add them).
struct RolloutStats {
  int64_t completions = 0;
  double reward_sum = 0;
  double reward_squares = 0;  // sum of reward^2
  int64_t length_sum = 0;     // new tokens per completion, summed
  int64_t length_max = 0;
  int64_t truncated = 0;  // completions that ended at max_new_tokens
  double seconds = 0;     // sampling and scoring
};

struct RolloutBatch {
  std::vector<GrpoGroup> groups;  // one per prompt, in the order asked
  RolloutStats stats;
};

// The text of `ids`. An id the tokenizer does not know (a model's
// vocabulary is often padded past its tokenizer's: Qwen's 151,936 rows for
// about 151,669 tokens) reads as U+FFFD instead of failing the step.
absl::StatusOr<std::string> CompletionText(const TokenizerDecoder& tokenizer,
                                           const std::vector<int32_t>& ids, bool skip_special);

// The generation options of a job: sampling, max_new_tokens, the EOS ids
// (the spec's, else the model's config.json) and stop sequences. Validated
// against the vocabulary.
absl::StatusOr<GenerationOptions> RolloutGenerationOptions(const JobSpec& spec,
                                                           const ModelConfig& config);

class RolloutSampler {
 public:
  // `tokenizer_dir`: the resolved grpo.rollout.tokenizer ("" for none).
  static absl::StatusOr<std::unique_ptr<RolloutSampler>> Create(const JobSpec& spec,
                                                                const ModelConfig& config,
                                                                Backend& backend,
                                                                const std::string& tokenizer_dir,
                                                                const RewardContext& reward);

  // The groups of the prompts at `indices` of `dataset` (a prompt dataset)
  // for optimizer step `step`.
  absl::StatusOr<RolloutBatch> Sample(const Dataset& dataset, const ModelTensors& weights,
                                      const std::vector<int64_t>& indices, int64_t step);

 private:
  RolloutSampler(const JobSpec& spec, const ModelConfig& config, Backend& backend,
                 GenerationOptions options, std::optional<TokenizerDecoder> tokenizer,
                 std::unique_ptr<RewardFunction> reward);

  const int64_t group_size_;
  const uint64_t seed_;
  Decoder decoder_;
  GenerationOptions options_;
  std::optional<TokenizerDecoder> tokenizer_;
  std::unique_ptr<RewardFunction> reward_;
};

}  // namespace sbp
