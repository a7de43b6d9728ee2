#include "worker/train/objectives/dpo.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/train/objectives/sequence_logprobs.h"

namespace sbp {
namespace {

// softplus(x) = log(1 + exp(x)), stable for large |x|.
double Softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

// sigmoid(x), stable for large |x|.
double Sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

absl::Status CheckArguments(const std::vector<DpoPair>& pairs,
                            const std::vector<ReferenceLogProbs>& reference, double beta,
                            int64_t global_pairs) {
  if (!std::isfinite(beta) || beta <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dpo: beta must be a positive number (got ", beta, ")"));
  }
  if (reference.size() != pairs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dpo: ", reference.size(), " reference log-probs for ", pairs.size(), " pairs"));
  }
  if (global_pairs != 0 && global_pairs < static_cast<int64_t>(pairs.size())) {
    return absl::InvalidArgumentError(absl::StrCat("dpo: global pair count ", global_pairs,
                                                   " is smaller than this batch's ", pairs.size(),
                                                   " pairs"));
  }
  return absl::OkStatus();
}

// Coefficient c on every valid target of `sequence` (0 elsewhere).
std::vector<float> ResponseCoefficients(const TokenSequence& sequence, double c) {
  const std::vector<int32_t> targets = ShiftedTargets(sequence);
  std::vector<float> coefficients(targets.size(), 0.0f);
  for (size_t t = 0; t < targets.size(); ++t) {
    if (targets[t] != kIgnoreIndex) coefficients[t] = static_cast<float>(c);
  }
  return coefficients;
}

absl::StatusOr<DpoResult> RunDpo(Engine& engine, const ModelTensors& policy,
                                 const std::vector<DpoPair>& pairs,
                                 const std::vector<ReferenceLogProbs>& reference, double beta,
                                 int64_t global_pairs, ModelTensors* grads) {
  RETURN_IF_ERROR(CheckArguments(pairs, reference, beta, global_pairs));
  const double n =
      static_cast<double>(global_pairs > 0 ? global_pairs : static_cast<int64_t>(pairs.size()));
  DpoResult result;
  result.pairs.reserve(pairs.size());
  for (size_t k = 0; k < pairs.size(); ++k) {
    const DpoPair& pair = pairs[k];
    DpoPairStats s;
    // No-grad pass: the pair's margin, hence its coefficients, before any
    // chunk of the backward runs.
    ASSIGN_OR_RETURN(s.policy_chosen, SequenceLogProb(engine, policy, pair.chosen));
    ASSIGN_OR_RETURN(s.policy_rejected, SequenceLogProb(engine, policy, pair.rejected));
    s.reference_chosen = reference[k].chosen;
    s.reference_rejected = reference[k].rejected;
    s.chosen_reward = beta * (s.policy_chosen - s.reference_chosen);
    s.rejected_reward = beta * (s.policy_rejected - s.reference_rejected);
    s.margin = s.chosen_reward - s.rejected_reward;
    s.loss = Softplus(-s.margin);
    result.loss += s.loss / n;
    result.tokens +=
        static_cast<int64_t>(pair.chosen.input_ids.size() + pair.rejected.input_ids.size());
    if (grads != nullptr) {
      // dL/dpi_c = -beta sigmoid(-m) / N, dL/dpi_r = -dL/dpi_c.
      const double c = -beta * Sigmoid(-s.margin) / n;
      const std::pair<const TokenSequence*, double> sides[2] = {{&pair.chosen, c},
                                                                {&pair.rejected, -c}};
      for (const auto& [sequence, coefficient] : sides) {
        // No target, no gradient (ZeRO-3 runs the pass all the same: batch.cc).
        if (CountValidTargets(*sequence) == 0 && engine.weight_source() == nullptr) continue;
        WeightedLogProbLoss loss(ResponseCoefficients(*sequence, coefficient));
        RETURN_IF_ERROR(RunTokenLoss(engine, policy, *sequence, loss, grads).status());
      }
    }
    result.pairs.push_back(s);
  }
  return result;
}

double Mean(const std::vector<DpoPairStats>& pairs, double (*value)(const DpoPairStats&)) {
  if (pairs.empty()) return 0;
  double sum = 0;
  for (const DpoPairStats& s : pairs) sum += value(s);
  return sum / static_cast<double>(pairs.size());
}

}  // namespace

double DpoResult::reward_accuracy() const {
  return Mean(pairs, [](const DpoPairStats& s) { return s.margin > 0 ? 1.0 : 0.0; });
}
double DpoResult::mean_margin() const {
  return Mean(pairs, [](const DpoPairStats& s) { return s.margin; });
}
double DpoResult::mean_chosen_reward() const {
  return Mean(pairs, [](const DpoPairStats& s) { return s.chosen_reward; });
}
double DpoResult::mean_rejected_reward() const {
  return Mean(pairs, [](const DpoPairStats& s) { return s.rejected_reward; });
}

absl::StatusOr<ReferenceLogProbs> ComputeReferenceLogProbs(Engine& reference_engine,
                                                           const ModelTensors& reference,
                                                           const DpoPair& pair) {
  ReferenceLogProbs r;
  ASSIGN_OR_RETURN(r.chosen, SequenceLogProb(reference_engine, reference, pair.chosen));
  ASSIGN_OR_RETURN(r.rejected, SequenceLogProb(reference_engine, reference, pair.rejected));
  return r;
}

absl::StatusOr<std::vector<ReferenceLogProbs>> ComputeReferenceLogProbs(
    Engine& reference_engine, const ModelTensors& reference, const std::vector<DpoPair>& pairs) {
  std::vector<ReferenceLogProbs> out;
  out.reserve(pairs.size());
  for (const DpoPair& pair : pairs) {
    ASSIGN_OR_RETURN(ReferenceLogProbs r,
                     ComputeReferenceLogProbs(reference_engine, reference, pair));
    out.push_back(r);
  }
  return out;
}

absl::StatusOr<DpoResult> DpoForwardBackward(Engine& policy_engine, const ModelTensors& policy,
                                             const std::vector<DpoPair>& pairs,
                                             const std::vector<ReferenceLogProbs>& reference,
                                             double beta, int64_t global_pairs,
                                             ModelTensors& grads) {
  return RunDpo(policy_engine, policy, pairs, reference, beta, global_pairs, &grads);
}

absl::StatusOr<DpoResult> DpoForwardBackward(Engine& policy_engine, const ModelTensors& policy,
                                             Engine& reference_engine,
                                             const ModelTensors& reference,
                                             const std::vector<DpoPair>& pairs, double beta,
                                             int64_t global_pairs, ModelTensors& grads) {
  ASSIGN_OR_RETURN(std::vector<ReferenceLogProbs> ref,
                   ComputeReferenceLogProbs(reference_engine, reference, pairs));
  return RunDpo(policy_engine, policy, pairs, ref, beta, global_pairs, &grads);
}

absl::StatusOr<DpoResult> DpoForward(Engine& policy_engine, const ModelTensors& policy,
                                     const std::vector<DpoPair>& pairs,
                                     const std::vector<ReferenceLogProbs>& reference, double beta,
                                     int64_t global_pairs) {
  return RunDpo(policy_engine, policy, pairs, reference, beta, global_pairs, nullptr);
}

}  // namespace sbp
