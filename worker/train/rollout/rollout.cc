#include "worker/train/rollout/rollout.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sbp {
namespace {

std::vector<int32_t> Ids(const std::vector<int64_t>& ids) {
  return std::vector<int32_t>(ids.begin(), ids.end());
}

}  // namespace

absl::StatusOr<std::string> CompletionText(const TokenizerDecoder& tokenizer,
                                           const std::vector<int32_t>& ids, bool skip_special) {
  absl::StatusOr<std::string> whole = tokenizer.Decode(ids, skip_special);
  if (whole.ok()) return whole;
  // Decode the runs of known ids; each unknown id is one replacement character.
  std::string text;
  std::vector<int32_t> run;
  auto flush = [&]() -> absl::Status {
    if (run.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(const std::string part, tokenizer.Decode(run, skip_special));
    text += part;
    run.clear();
    return absl::OkStatus();
  };
  for (int32_t id : ids) {
    const int32_t one[] = {id};
    if (tokenizer.Decode(one, skip_special).ok()) {
      run.push_back(id);
      continue;
    }
    RETURN_IF_ERROR(flush());
    text += "\xEF\xBF\xBD";
  }
  RETURN_IF_ERROR(flush());
  return text;
}

absl::StatusOr<GenerationOptions> RolloutGenerationOptions(const JobSpec& spec,
                                                           const ModelConfig& config) {
  const RolloutSpec& r = spec.grpo.rollout;
  GenerationOptions o;
  o.max_new_tokens = r.max_new_tokens;
  o.sampling = {r.temperature, r.top_p, r.top_k};
  o.eos_token_ids = Ids(r.eos_from_config ? config.eos_token_ids : r.eos_token_ids);
  for (const std::vector<int64_t>& stop : r.stop) o.stop_sequences.push_back(Ids(stop));
  const absl::Status valid = CheckGenerationOptions(o, config.vocab_size);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("grpo.rollout: ", valid.message()));
  }
  return o;
}

absl::StatusOr<std::unique_ptr<RolloutSampler>> RolloutSampler::Create(
    const JobSpec& spec, const ModelConfig& config, Backend& backend,
    const std::string& tokenizer_dir, const RewardContext& reward) {
  if (!spec.grpo.online()) {
    return absl::FailedPreconditionError("the job samples no rollouts (grpo.rollout is not set)");
  }
  ASSIGN_OR_RETURN(GenerationOptions options, RolloutGenerationOptions(spec, config));
  std::optional<TokenizerDecoder> tokenizer;
  if (!tokenizer_dir.empty()) {
    absl::StatusOr<TokenizerDecoder> loaded = TokenizerDecoder::Load(tokenizer_dir);
    if (!loaded.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("grpo.rollout.tokenizer: ", loaded.status().message()));
    }
    tokenizer = *std::move(loaded);
  }
  RewardContext context = reward;
  context.max_new_tokens = spec.grpo.rollout.max_new_tokens;
  ASSIGN_OR_RETURN(std::unique_ptr<RewardFunction> function,
                   MakeRewardFunction(spec.grpo.reward, context));
  return std::unique_ptr<RolloutSampler>(new RolloutSampler(
      spec, config, backend, std::move(options), std::move(tokenizer), std::move(function)));
}

RolloutSampler::RolloutSampler(const JobSpec& spec, const ModelConfig& config, Backend& backend,
                               GenerationOptions options, std::optional<TokenizerDecoder> tokenizer,
                               std::unique_ptr<RewardFunction> reward)
    : group_size_(spec.grpo.rollout.group_size),
      seed_(static_cast<uint64_t>(spec.train.seed)),
      decoder_(config, backend, spec.streambp.chunk_tokens),
      options_(std::move(options)),
      tokenizer_(std::move(tokenizer)),
      reward_(std::move(reward)) {}

absl::StatusOr<RolloutBatch> RolloutSampler::Sample(const Dataset& dataset,
                                                    const ModelTensors& weights,
                                                    const std::vector<int64_t>& indices,
                                                    int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<GenerationRequest> requests;
  for (int64_t index : indices) {
    const RolloutPrompt& prompt = dataset.PromptAt(index);
    for (int64_t c = 0; c < group_size_; ++c) {
      requests.push_back(
          {prompt.prompt, SamplerStream(seed_, static_cast<uint64_t>(step),
                                        static_cast<uint64_t>(index), static_cast<uint64_t>(c))});
    }
  }
  ASSIGN_OR_RETURN(std::vector<Generation> generations,
                   Generate(decoder_, weights, std::move(requests), options_));

  // Score every completion of the step in one call (one program run).
  std::vector<RewardInput> inputs;
  inputs.reserve(generations.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    const RolloutPrompt& prompt = dataset.PromptAt(indices[k]);
    std::string prompt_text;
    if (tokenizer_) {
      ASSIGN_OR_RETURN(prompt_text, CompletionText(*tokenizer_, prompt.prompt, false));
    }
    for (int64_t c = 0; c < group_size_; ++c) {
      const Generation& g = generations[k * group_size_ + c];
      RewardInput input;
      input.prompt_ids = prompt.prompt;
      input.completion_ids = g.content();
      input.prompt_text = prompt_text;
      if (tokenizer_) {
        ASSIGN_OR_RETURN(input.completion_text,
                         CompletionText(*tokenizer_, input.completion_ids, /*skip_special=*/true));
      }
      input.fields = prompt.fields;
      input.truncated = g.finish == FinishReason::kLength;
      inputs.push_back(std::move(input));
    }
  }
  ASSIGN_OR_RETURN(const std::vector<double> rewards, reward_->Score(inputs));
  if (rewards.size() != inputs.size()) {
    return absl::InternalError(absl::StrCat("the reward returned ", rewards.size(), " values for ",
                                            inputs.size(), " completions"));
  }

  RolloutBatch batch;
  for (size_t k = 0; k < indices.size(); ++k) {
    GrpoGroup group;
    group.prompt = dataset.PromptAt(indices[k]).prompt;
    for (int64_t c = 0; c < group_size_; ++c) {
      const size_t n = k * group_size_ + c;
      Generation& g = generations[n];
      GrpoCompletion completion;
      completion.ids = std::move(g.ids);  // trained with the token that ended it
      completion.reward = rewards[n];
      RolloutStats& s = batch.stats;
      const int64_t length = static_cast<int64_t>(completion.ids.size());
      s.completions += 1;
      s.reward_sum += rewards[n];
      s.reward_squares += rewards[n] * rewards[n];
      s.length_sum += length;
      s.length_max = std::max(s.length_max, length);
      s.truncated += inputs[n].truncated ? 1 : 0;
      group.completions.push_back(std::move(completion));
    }
    batch.groups.push_back(std::move(group));
  }
  batch.stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return batch;
}

}  // namespace sbp
