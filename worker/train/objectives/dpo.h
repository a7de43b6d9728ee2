// Direct Preference Optimization (Rafailov et al. 2023), the sigmoid loss of
// TRL's DPOTrainer, exact under StreamBP.
//
// For pair k (chosen c, rejected r, sharing a masked prompt):
//   pi_c  = sum_t logp_t over the chosen response's valid targets under the
//           policy; pi_r likewise for the rejected response;
//   ref_c, ref_r = the same sums under the REFERENCE model (a real forward of
//           a separate set of weights, never the policy's hidden states);
//   m_k   = beta * ((pi_c - ref_c) - (pi_r - ref_r));
//   L     = (1/N) * sum_k -log sigmoid(m_k) = (1/N) * sum_k softplus(-m_k),
// with N the GLOBAL pair count of the step (all micro-batches, all ranks).
//
// Gradient: dL/dpi_c = -beta * sigmoid(-m_k) / N, dL/dpi_r = +beta *
// sigmoid(-m_k) / N. pi is a plain sum of logp_t, so every valid target of
// the chosen (rejected) sequence gets the same coefficient c_t = dL/dpi_c
// (dL/dpi_r), backpropagated with WeightedLogProbLoss. The coefficient needs
// m_k, so a no-grad policy forward of both sequences runs first: 2 policy
// forwards + 2 policy forward-backwards (+ 2 reference forwards, cacheable)
// per pair, and every chunk of the backward is exact.
//
// Metrics (TRL's names): rewards/chosen = beta (pi_c - ref_c), rewards/rejected
// = beta (pi_r - ref_r), rewards/margins = m_k, rewards/accuracies = 1[m_k > 0].
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/train/jsonl_data.h"

namespace sbp {

// Summed reference log-probabilities of one pair's responses (ref_c, ref_r).
// They depend only on the example and the frozen reference, so a trainer may
// compute them once per example and cache them.
struct ReferenceLogProbs {
  double chosen = 0;
  double rejected = 0;
};

absl::StatusOr<ReferenceLogProbs> ComputeReferenceLogProbs(Engine& reference_engine,
                                                           const ModelTensors& reference,
                                                           const DpoPair& pair);
absl::StatusOr<std::vector<ReferenceLogProbs>> ComputeReferenceLogProbs(
    Engine& reference_engine, const ModelTensors& reference, const std::vector<DpoPair>& pairs);

struct DpoPairStats {
  double policy_chosen = 0;       // pi_c
  double policy_rejected = 0;     // pi_r
  double reference_chosen = 0;    // ref_c
  double reference_rejected = 0;  // ref_r
  double chosen_reward = 0;       // beta (pi_c - ref_c)
  double rejected_reward = 0;     // beta (pi_r - ref_r)
  double margin = 0;              // m = chosen_reward - rejected_reward
  double loss = 0;                // softplus(-m), not divided by N
};

struct DpoResult {
  double loss = 0;     // sum over these pairs of softplus(-m) / N: the share of the step loss
  int64_t tokens = 0;  // tokens of the policy sequences (chosen + rejected)
  std::vector<DpoPairStats> pairs;  // one per pair, in order

  // Means over these pairs (0 when there are none).
  double reward_accuracy() const;  // fraction with m > 0
  double mean_margin() const;
  double mean_chosen_reward() const;
  double mean_rejected_reward() const;
};

// Loss, metrics and gradients (ACCUMULATED into `grads`) of `pairs`, given
// their reference log-probs (`reference` parallel to `pairs`). `global_pairs`
// is N (0: pairs.size()); it must be >= pairs.size(). InvalidArgument for a
// non-finite or non-positive beta or mismatched sizes.
absl::StatusOr<DpoResult> DpoForwardBackward(Engine& policy_engine, const ModelTensors& policy,
                                             const std::vector<DpoPair>& pairs,
                                             const std::vector<ReferenceLogProbs>& reference,
                                             double beta, int64_t global_pairs,
                                             ModelTensors& grads);

// The same, running the reference model's forward first (one real forward of
// each response through `reference`).
absl::StatusOr<DpoResult> DpoForwardBackward(Engine& policy_engine, const ModelTensors& policy,
                                             Engine& reference_engine,
                                             const ModelTensors& reference,
                                             const std::vector<DpoPair>& pairs, double beta,
                                             int64_t global_pairs, ModelTensors& grads);

// Loss and metrics only (evaluation): policy forwards, no gradient.
absl::StatusOr<DpoResult> DpoForward(Engine& policy_engine, const ModelTensors& policy,
                                     const std::vector<DpoPair>& pairs,
                                     const std::vector<ReferenceLogProbs>& reference, double beta,
                                     int64_t global_pairs);

}  // namespace sbp
