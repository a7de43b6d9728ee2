// Softmax cross-entropy and target log-probabilities over a chunk of logits
// (CPU, fp32 storage, double where sums matter).
//
// For a row r with logits l [V] and target t = targets[r] (-100 = ignored):
//   m = max_j l_j,  lse = m + log(sum_j exp(l_j - m)),  p_j = exp(l_j - lse).
//
//   CrossEntropyForwardBackward (fused, in place):
//     returns sum over valid rows of (lse - l_t) in double;
//     logits <- scale * (p - onehot(t)); ignored rows <- 0.
//   LogProbsForward:  logprobs[r] = l_t - lse, lse[r] = lse (both 0 on ignored rows);
//     lse is saved for LogProbsBackward.
//   LogProbsBackward (in place): logits <- dlogprobs[r] * (onehot(t) - p), the
//     gradient of sum_r dlogprobs[r] * logprobs[r]; ignored rows <- 0.
//
// Shapes: logits [N, V] f32 (any shape with last dim V and N rows); targets [N]
// i32; logprobs, lse, dlogprobs [N] f32. A target outside [0, V) other than
// -100 is a CHECK failure naming it. Stable for extreme logits (the row max is
// subtracted before exp; exp sums and the loss are accumulated in double).
// exp is a vectorised polynomial (relative error < 2.5e-7, kernels/cpu/
// vector_math.h), taken once per logit: the fused op stores exp(l - m) in
// place and then scales the row by scale / sum.
// Parallel over rows; the loss is summed over rows in order, so every result
// is independent of the thread count.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace sbp::cpu {

inline constexpr int32_t kIgnoreIndex = -100;

double CrossEntropyForwardBackward(Tensor& logits, const Tensor& targets, float scale);
void LogProbsForward(const Tensor& logits, const Tensor& targets, Tensor& logprobs, Tensor& lse);
void LogProbsBackward(Tensor& logits, const Tensor& targets, const Tensor& lse,
                      const Tensor& dlogprobs);

}  // namespace sbp::cpu
