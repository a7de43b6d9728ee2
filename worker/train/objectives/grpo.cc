#include "worker/train/objectives/grpo.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/train/objectives/sequence_logprobs.h"

namespace sbp {
namespace {

// Position of the target that predicts completion token j, or -1 when no
// position does (token 0 after an empty prompt).
int64_t TargetPosition(const GrpoGroup& group, size_t j) {
  return static_cast<int64_t>(group.prompt.size() + j) - 1;
}

struct TokenParams {
  double weight = 0;     // w_i
  double advantage = 0;  // A_i
  double epsilon = 0;
  double beta = 0;
};

// The per-token GRPO objective of one sequence (formulas in grpo.h).
class GrpoTokenLoss final : public LogProbTokenLoss {
 public:
  // `old` and `ref` are per position (empty: on-policy / beta = 0).
  GrpoTokenLoss(const TokenSequence& sequence, TokenParams params, std::vector<float> old,
                const std::vector<float>* ref)
      : LogProbTokenLoss(static_cast<int64_t>(sequence.input_ids.size())),
        params_(params),
        old_(std::move(old)),
        ref_(ref),
        logprobs_(sequence.input_ids.size(), 0.0f),
        dlogprobs_(sequence.input_ids.size(), 0.0f) {
    const std::vector<int32_t> targets = ShiftedTargets(sequence);
    valid_.resize(targets.size());
    for (size_t t = 0; t < targets.size(); ++t) valid_[t] = targets[t] != kIgnoreIndex;
  }

  double ForwardBackward(Backend& backend, Tensor& logits, const Tensor& targets,
                         int64_t begin) override {
    return Chunk(backend, logits, targets, begin, /*backward=*/true);
  }
  double Forward(Backend& backend, Tensor& logits, const Tensor& targets, int64_t begin) override {
    return Chunk(backend, logits, targets, begin, /*backward=*/false);
  }

  double kl_sum() const { return kl_sum_; }
  int64_t clipped_tokens() const { return clipped_tokens_; }

 private:
  double Chunk(Backend& backend, Tensor& logits, const Tensor& targets, int64_t begin,
               bool backward) {
    if (!scratch_.Forward(backend, logits, targets, begin, logprobs_.data())) {
      if (backward) backend.Fill(logits, 0.0f);
      return 0;
    }
    const double a = params_.advantage, eps = params_.epsilon, beta = params_.beta;
    const double w = params_.weight;
    double loss = 0;
    for (int64_t t = begin; t < begin + targets.numel(); ++t) {
      dlogprobs_[t] = 0.0f;
      if (!valid_[t]) continue;
      const double x = logprobs_[t];
      const double o = old_.empty() ? x : static_cast<double>(old_[t]);
      const double rho = std::exp(x - o);
      const double rho_clipped = std::clamp(rho, 1.0 - eps, 1.0 + eps);
      double l = -std::min(rho * a, rho_clipped * a);
      const bool clipped = (a > 0 && rho > 1.0 + eps) || (a < 0 && rho < 1.0 - eps);
      double d = clipped ? 0.0 : -a * rho;
      if (beta != 0) {
        const double delta = static_cast<double>((*ref_)[t]) - x;
        const double kl = std::exp(delta) - delta - 1.0;
        l += beta * kl;
        d += beta * (1.0 - std::exp(delta));
        kl_sum_ += kl;
      }
      clipped_tokens_ += clipped;
      loss += w * l;
      dlogprobs_[t] = static_cast<float>(w * d);
    }
    if (backward) scratch_.Backward(backend, logits, targets, begin, dlogprobs_.data());
    return loss;
  }

  TokenParams params_;
  std::vector<float> old_;
  const std::vector<float>* ref_;
  std::vector<uint8_t> valid_;
  std::vector<float> logprobs_, dlogprobs_;
  double kl_sum_ = 0;
  int64_t clipped_tokens_ = 0;
};

absl::Status CheckOptions(const GrpoOptions& options) {
  if (!std::isfinite(options.beta) || options.beta < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("grpo: beta must be a non-negative number (got ", options.beta, ")"));
  }
  if (!std::isfinite(options.epsilon) || options.epsilon < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("grpo: epsilon must be a non-negative number (got ", options.epsilon, ")"));
  }
  if (options.max_completion_length < 0) {
    return absl::InvalidArgumentError(absl::StrCat("grpo: max_completion_length must be >= 0 (got ",
                                                   options.max_completion_length, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckShapes(const std::vector<GrpoGroup>& groups,
                         const GrpoReferenceLogProbs* reference) {
  if (reference != nullptr && reference->logprobs.size() != groups.size()) {
    return absl::InvalidArgumentError(absl::StrCat("grpo: reference log-probs for ",
                                                   reference->logprobs.size(), " groups, got ",
                                                   groups.size()));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    const GrpoGroup& group = groups[g];
    if (group.completions.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("grpo: group ", g, " has no completions"));
    }
    if (reference != nullptr && reference->logprobs[g].size() != group.completions.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grpo: group ", g, ": reference log-probs for ", reference->logprobs[g].size(),
          " completions, got ", group.completions.size()));
    }
    for (size_t i = 0; i < group.completions.size(); ++i) {
      const GrpoCompletion& c = group.completions[i];
      if (!c.old_logprobs.empty() && c.old_logprobs.size() != c.ids.size()) {
        return absl::InvalidArgumentError(absl::StrCat("grpo: group ", g, " completion ", i, ": ",
                                                       c.old_logprobs.size(), " old_logprobs for ",
                                                       c.ids.size(), " ids"));
      }
      const size_t length = group.prompt.size() + c.ids.size();
      if (reference != nullptr && reference->logprobs[g][i].size() != length) {
        return absl::InvalidArgumentError(absl::StrCat(
            "grpo: group ", g, " completion ", i, ": ", reference->logprobs[g][i].size(),
            " reference log-probs for a sequence of ", length, " tokens"));
      }
    }
  }
  return absl::OkStatus();
}

// w_i for a sequence of n completion tokens.
double SequenceWeight(const GrpoOptions& options, const GrpoCounts& global, int64_t l_max,
                      int64_t n) {
  if (n == 0) return 0;
  switch (options.loss) {
    case GrpoLoss::kGrpo:
      return 1.0 / (static_cast<double>(n) * static_cast<double>(global.sequences));
    case GrpoLoss::kBnpo:
      return 1.0 / static_cast<double>(global.completion_tokens);
    case GrpoLoss::kDrGrpo:
      return 1.0 / (static_cast<double>(global.sequences) * static_cast<double>(l_max));
  }
  return 0;
}

absl::StatusOr<GrpoResult> RunGrpo(Engine& engine, const ModelTensors& policy,
                                   const std::vector<GrpoGroup>& groups,
                                   const GrpoReferenceLogProbs* reference,
                                   const GrpoOptions& options, const GrpoCounts& global,
                                   ModelTensors* grads) {
  RETURN_IF_ERROR(CheckOptions(options));
  if (options.beta > 0 && reference == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("grpo: beta = ", options.beta, " needs reference log-probs"));
  }
  RETURN_IF_ERROR(CheckShapes(groups, reference));
  const GrpoCounts local = CountGrpo(groups);
  if (global.sequences < local.sequences || global.completion_tokens < local.completion_tokens ||
      global.max_completion_length < local.max_completion_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grpo: global counts (", global.sequences, " sequences, ", global.completion_tokens,
        " completion tokens, longest ", global.max_completion_length,
        ") are smaller than this batch's (", local.sequences, ", ", local.completion_tokens, ", ",
        local.max_completion_length, ")"));
  }
  const int64_t l_max = options.max_completion_length > 0 ? options.max_completion_length
                                                          : global.max_completion_length;
  if (options.loss == GrpoLoss::kDrGrpo && local.max_completion_length > l_max) {
    return absl::InvalidArgumentError(
        absl::StrCat("grpo: a completion of ", local.max_completion_length,
                     " tokens is longer than max_completion_length ", l_max));
  }

  GrpoResult result;
  result.advantages.reserve(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const GrpoGroup& group = groups[g];
    result.advantages.push_back(GrpoAdvantages(group));
    for (size_t i = 0; i < group.completions.size(); ++i) {
      const GrpoCompletion& completion = group.completions[i];
      const TokenSequence sequence = GrpoSequence(group, i);
      const int64_t n = CountValidTargets(sequence);
      result.sequences += 1;
      result.completion_tokens += n;
      result.reward_sum += completion.reward;
      if (n == 0) continue;  // no completion token to score
      result.tokens += static_cast<int64_t>(sequence.input_ids.size());

      std::vector<float> old;
      if (!completion.old_logprobs.empty()) {
        old.assign(sequence.input_ids.size(), 0.0f);
        for (size_t j = 0; j < completion.ids.size(); ++j) {
          const int64_t t = TargetPosition(group, j);
          if (t >= 0) old[static_cast<size_t>(t)] = completion.old_logprobs[j];
        }
      }
      TokenParams params;
      params.weight = SequenceWeight(options, global, l_max, n);
      params.advantage = result.advantages.back()[i];
      params.epsilon = options.epsilon;
      params.beta = options.beta;
      const std::vector<float>* ref = options.beta > 0 ? &reference->logprobs[g][i] : nullptr;
      GrpoTokenLoss loss(sequence, params, std::move(old), ref);
      ASSIGN_OR_RETURN(double value, RunTokenLoss(engine, policy, sequence, loss, grads));
      // The loss's own figures cover this rank's rows of the sequence.
      double figures[2] = {loss.kl_sum(), static_cast<double>(loss.clipped_tokens())};
      RETURN_IF_ERROR(engine.SumOverSequenceGroup(figures, 2));
      result.loss += value;
      result.kl_sum += figures[0];
      result.clipped_tokens += static_cast<int64_t>(figures[1]);
    }
  }
  return result;
}

}  // namespace

std::vector<double> GrpoAdvantages(const GrpoGroup& group) {
  const size_t g = group.completions.size();
  std::vector<double> advantages(g, 0.0);
  if (g < 2) return advantages;
  double mean = 0;
  for (const GrpoCompletion& c : group.completions) mean += c.reward;
  mean /= static_cast<double>(g);
  double squares = 0;
  for (const GrpoCompletion& c : group.completions) {
    squares += (c.reward - mean) * (c.reward - mean);
  }
  // Sample standard deviation (torch.std, unbiased), as TRL.
  const double sd = std::sqrt(squares / static_cast<double>(g - 1));
  for (size_t i = 0; i < g; ++i) {
    advantages[i] = (group.completions[i].reward - mean) / (sd + kGrpoAdvantageEpsilon);
  }
  return advantages;
}

GrpoOptions GrpoOptionsFromSpec(const GrpoSpec& spec) {
  GrpoOptions options;
  options.beta = spec.beta;
  options.epsilon = spec.epsilon;
  options.loss = spec.loss;
  return options;
}

GrpoCounts& GrpoCounts::operator+=(const GrpoCounts& other) {
  sequences += other.sequences;
  completion_tokens += other.completion_tokens;
  max_completion_length = std::max(max_completion_length, other.max_completion_length);
  return *this;
}

GrpoCounts CountGrpo(const std::vector<GrpoGroup>& groups) {
  GrpoCounts counts;
  for (const GrpoGroup& group : groups) {
    for (size_t i = 0; i < group.completions.size(); ++i) {
      // Valid targets: every completion token, except a first token that
      // follows an empty prompt (no position predicts it).
      const int64_t ids = static_cast<int64_t>(group.completions[i].ids.size());
      const int64_t n = group.prompt.empty() ? std::max<int64_t>(ids - 1, 0) : ids;
      counts.sequences += 1;
      counts.completion_tokens += n;
      counts.max_completion_length = std::max(counts.max_completion_length, n);
    }
  }
  return counts;
}

double GrpoResult::mean_kl() const {
  return completion_tokens > 0 ? kl_sum / static_cast<double>(completion_tokens) : 0.0;
}
double GrpoResult::clip_fraction() const {
  return completion_tokens > 0
             ? static_cast<double>(clipped_tokens) / static_cast<double>(completion_tokens)
             : 0.0;
}
double GrpoResult::mean_reward() const {
  return sequences > 0 ? reward_sum / static_cast<double>(sequences) : 0.0;
}

absl::StatusOr<GrpoReferenceLogProbs> ComputeGrpoReferenceLogProbs(
    Engine& reference_engine, const ModelTensors& reference, const std::vector<GrpoGroup>& groups) {
  GrpoReferenceLogProbs out;
  out.logprobs.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].completions.size(); ++i) {
      ASSIGN_OR_RETURN(std::vector<float> lp,
                       TokenLogProbs(reference_engine, reference, GrpoSequence(groups[g], i)));
      out.logprobs[g].push_back(std::move(lp));
    }
  }
  return out;
}

absl::StatusOr<GrpoResult> GrpoForwardBackward(Engine& policy_engine, const ModelTensors& policy,
                                               const std::vector<GrpoGroup>& groups,
                                               const GrpoReferenceLogProbs* reference,
                                               const GrpoOptions& options, const GrpoCounts& global,
                                               ModelTensors& grads) {
  return RunGrpo(policy_engine, policy, groups, reference, options, global, &grads);
}

absl::StatusOr<GrpoResult> GrpoForwardBackward(Engine& policy_engine, const ModelTensors& policy,
                                               Engine* reference_engine,
                                               const ModelTensors* reference,
                                               const std::vector<GrpoGroup>& groups,
                                               const GrpoOptions& options, const GrpoCounts& global,
                                               ModelTensors& grads) {
  if (options.beta == 0) {
    return RunGrpo(policy_engine, policy, groups, nullptr, options, global, &grads);
  }
  if (reference_engine == nullptr || reference == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("grpo: beta = ", options.beta, " needs a reference model"));
  }
  RETURN_IF_ERROR(CheckOptions(options));
  ASSIGN_OR_RETURN(GrpoReferenceLogProbs ref,
                   ComputeGrpoReferenceLogProbs(*reference_engine, *reference, groups));
  return RunGrpo(policy_engine, policy, groups, &ref, options, global, &grads);
}

absl::StatusOr<GrpoResult> GrpoForward(Engine& policy_engine, const ModelTensors& policy,
                                       const std::vector<GrpoGroup>& groups,
                                       const GrpoReferenceLogProbs* reference,
                                       const GrpoOptions& options, const GrpoCounts& global) {
  return RunGrpo(policy_engine, policy, groups, reference, options, global, nullptr);
}

}  // namespace sbp
