// What the LM head does with each chunk of logits. The head never holds more
// than one chunk of logits; a TokenLoss turns a chunk into its share of the
// loss and (for backward) into dL/dlogits, in place. Chunk-exact objectives
// need every normaliser fixed before the first chunk runs, so a TokenLoss is
// built with its global counts.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace sbp {

class TokenLoss {
 public:
  virtual ~TokenLoss() = default;
  // logits [n, V] of sequence rows [begin, begin + n); targets [n] i32 (-100
  // ignored). Returns the chunk's loss contribution and overwrites logits
  // with dL/dlogits.
  virtual double ForwardBackward(Backend& backend, Tensor& logits, const Tensor& targets,
                                 int64_t begin) = 0;
  // The same contribution without gradients (logits may be clobbered).
  virtual double Forward(Backend& backend, Tensor& logits, const Tensor& targets,
                         int64_t begin) = 0;
};

// Causal-LM cross-entropy: loss = scale * sum over valid targets of
// -log softmax(logits)[target]; with scale = 1 / (valid targets of the whole
// batch) this is Hugging Face's mean loss.
class CrossEntropyTokenLoss final : public TokenLoss {
 public:
  explicit CrossEntropyTokenLoss(double scale) : scale_(scale) {}
  double ForwardBackward(Backend& backend, Tensor& logits, const Tensor& targets,
                         int64_t begin) override;
  double Forward(Backend& backend, Tensor& logits, const Tensor& targets, int64_t begin) override;

 private:
  double scale_;
};

}  // namespace sbp
