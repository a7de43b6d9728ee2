// Group Relative Policy Optimization (Shao et al. 2024) on offline rollouts,
// following TRL's GRPOTrainer, exact under StreamBP.
//
// A group is a prompt with G completions and rewards r_1..r_G. Advantages:
//   A_i = (r_i - mean(r)) / (std(r) + 1e-4),
// std the SAMPLE standard deviation (divide by G - 1; torch.std's unbiased
// default, as TRL). A group with one completion, or with all rewards equal,
// has A_i = 0.
//
// Sequence i = prompt + completion i with the prompt masked; its completion
// tokens are its valid targets t (position t predicts token t + 1).
//   x_t   = logp_t under the policy (differentiated);
//   o_t   = the old policy's log-prob: completion.old_logprobs[j] for the
//           completion token j that position t predicts; without
//           old_logprobs o_t = x_t detached (on-policy: rho_t = 1, but its
//           gradient is rho_t * grad x_t);
//   ref_t = logp_t under the reference model (a real forward; beta = 0 skips
//           it);
//   rho_t = exp(x_t - o_t);
//   l_t   = -min(rho_t A, clip(rho_t, 1 - eps, 1 + eps) A) + beta KL_t,
//   KL_t  = exp(ref_t - x_t) - (ref_t - x_t) - 1          (k3 estimator).
// Per-token gradient, computed inside the chunk from the chunk's x_t:
//   dl_t/dx_t = -A rho_t [not clipped] + beta (1 - exp(ref_t - x_t)),
//   clipped <=> (A > 0 and rho_t > 1 + eps) or (A < 0 and rho_t < 1 - eps):
// there the min picks the constant clipped branch and the policy term has
// no gradient; elsewhere (boundaries included) both branches agree.
//
// Step loss L = sum_i w_i sum_t l_t, the weights fixed before any chunk from
// counts over the whole step (all micro-batches, all ranks):
//   grpo:    w_i = 1 / (n_i * S)      mean over each sequence's tokens, then
//                                     over the step's S sequences;
//   bnpo:    w_i = 1 / N_tok          mean over the step's N_tok tokens;
//   dr_grpo: w_i = 1 / (S * L_max)    L_max = max_completion_length (TRL's
//                                     Dr. GRPO), default the longest
//                                     completion of the step;
// n_i = completion tokens of sequence i. dL/dx_t = w_i dl_t/dx_t.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/train/job_spec.h"
#include "worker/train/jsonl_data.h"

namespace sbp {

inline constexpr double kGrpoAdvantageEpsilon = 1e-4;

// A_i of one group (see above), in completion order.
std::vector<double> GrpoAdvantages(const GrpoGroup& group);

struct GrpoOptions {
  double beta = 0.04;    // KL weight; 0: no reference forward
  double epsilon = 0.2;  // ratio clip [1 - epsilon, 1 + epsilon]
  GrpoLoss loss = GrpoLoss::kGrpo;
  int64_t max_completion_length = 0;  // dr_grpo's L_max; 0: GrpoCounts' longest
};

GrpoOptions GrpoOptionsFromSpec(const GrpoSpec& spec);

// Normaliser counts. The trainer sums them over every micro-batch (and rank)
// of a step with += and passes the total to each call.
struct GrpoCounts {
  int64_t sequences = 0;              // S: completions
  int64_t completion_tokens = 0;      // N_tok: completion tokens (valid targets)
  int64_t max_completion_length = 0;  // longest completion, in valid targets
  GrpoCounts& operator+=(const GrpoCounts& other);
};

GrpoCounts CountGrpo(const std::vector<GrpoGroup>& groups);

// Reference log-probs per group, per completion, per position of
// GrpoSequence(group, i) (TokenLogProbs under the reference; 0 where
// ignored). Depends only on the data and the frozen reference: cacheable.
struct GrpoReferenceLogProbs {
  std::vector<std::vector<std::vector<float>>> logprobs;
};

absl::StatusOr<GrpoReferenceLogProbs> ComputeGrpoReferenceLogProbs(
    Engine& reference_engine, const ModelTensors& reference, const std::vector<GrpoGroup>& groups);

struct GrpoResult {
  double loss = 0;                // this call's share of the step loss L
  int64_t sequences = 0;          // completions in this call
  int64_t completion_tokens = 0;  // their completion tokens
  int64_t tokens = 0;             // prompt + completion tokens run through the policy
  double kl_sum = 0;              // sum of KL_t over completion tokens (0 when beta = 0)
  int64_t clipped_tokens = 0;     // tokens whose policy term is clipped
  double reward_sum = 0;          // sum of rewards over completions
  std::vector<std::vector<double>> advantages;  // per group, per completion

  // Means over this call (0 when empty); a trainer aggregates the sums.
  double mean_kl() const;
  double clip_fraction() const;
  double mean_reward() const;
};

// Loss, metrics and gradients (ACCUMULATED into `grads`) of `groups`.
// `reference` holds the reference log-probs and may be null only when
// options.beta == 0. `global` are the step's counts (each field >= this
// call's). InvalidArgument for bad options, counts or shapes.
absl::StatusOr<GrpoResult> GrpoForwardBackward(Engine& policy_engine, const ModelTensors& policy,
                                               const std::vector<GrpoGroup>& groups,
                                               const GrpoReferenceLogProbs* reference,
                                               const GrpoOptions& options, const GrpoCounts& global,
                                               ModelTensors& grads);

// The same, running the reference forward first when options.beta > 0
// (reference_engine and reference may be null when beta == 0: nothing runs).
absl::StatusOr<GrpoResult> GrpoForwardBackward(Engine& policy_engine, const ModelTensors& policy,
                                               Engine* reference_engine,
                                               const ModelTensors* reference,
                                               const std::vector<GrpoGroup>& groups,
                                               const GrpoOptions& options, const GrpoCounts& global,
                                               ModelTensors& grads);

// Loss and metrics only (policy forward, no gradient).
absl::StatusOr<GrpoResult> GrpoForward(Engine& policy_engine, const ModelTensors& policy,
                                       const std::vector<GrpoGroup>& groups,
                                       const GrpoReferenceLogProbs* reference,
                                       const GrpoOptions& options, const GrpoCounts& global);

}  // namespace sbp
