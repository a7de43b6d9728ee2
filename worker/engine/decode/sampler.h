// Next-token sampling from a row of logits: temperature, top-k and top-p
// (nucleus), reproducible from a seed.
//
// With logits z over the vocabulary and temperature tau > 0:
//   p_i = softmax(z / tau)_i;
//   top-k keeps the k largest p_i (ties broken by the lower id);
//   top-p keeps the smallest prefix of the kept ids, in order of decreasing
//   p_i, whose mass reaches top_p (at least one id);
//   the token is drawn from the kept p_i renormalised, by inverse CDF with a
//   uniform u in [0, 1) from the sequence's own SplitMix64 stream.
// tau = 0 is greedy: the largest z (lowest id among ties), no randomness used.
//
// Each sampled token also carries its log-probability under the policy,
// log softmax(z)_token in fp32 at temperature 1: the quantity the GRPO loss
// differentiates (objectives/grpo.h), so ratios against it compare like with
// like.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace sbp {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy
  double top_p = 1.0;        // in (0, 1]; 1: off
  int64_t top_k = 0;         // 0: off
};

// InvalidArgument naming the field when an option is out of range.
absl::Status CheckSamplingOptions(const SamplingOptions& options);

struct SampledToken {
  int32_t id = 0;
  float logprob = 0;  // log softmax(z)[id] at temperature 1, fp32
};

// A deterministic random stream (SplitMix64), one per sequence, so that a
// sequence's tokens do not depend on which others share its batch or rank.
class SamplerStream {
 public:
  // The stream of (seed, a, b, c): e.g. the job seed, the step, the prompt's
  // dataset index and the completion's index in its group.
  explicit SamplerStream(uint64_t seed, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0);
  double NextUniform();  // in [0, 1), 53 bits
  uint64_t state() const { return state_; }
  void set_state(uint64_t state) { state_ = state; }

 private:
  uint64_t state_;
};

// Samples from `logits[0, vocab)` (host fp32). `scratch` holds vocab floats
// and ids between calls (grown as needed).
class TokenSampler {
 public:
  explicit TokenSampler(SamplingOptions options) : options_(options) {}
  SampledToken Sample(const float* logits, int64_t vocab, SamplerStream& stream);
  const SamplingOptions& options() const { return options_; }

 private:
  SamplingOptions options_;
  std::vector<float> weights_;  // unnormalised tempered probabilities
  std::vector<int32_t> order_;
};

}  // namespace sbp
