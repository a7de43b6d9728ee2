// Per-token log-probabilities of a sequence's targets, the building block of
// the preference and RL objectives (DPO, GRPO).
//
// For position t of a sequence with targets y_t (= labels[t + 1], -100
// ignored), logp_t = log softmax(logits_t)[y_t], and 0 where y_t is ignored.
//
// Every TokenLoss here keeps its per-position data (coefficients, recorded
// log-probs) in host vectors indexed by sequence position, so a chunk of rows
// [begin, begin + n) reads and writes entries [begin, begin + n): chunks are
// independent and StreamBP stays exact. Device scratch (log-probs, logsumexp
// and dlogprobs, [T] f32 each) is allocated from the backend's allocator on
// the first chunk; an allocation failure is kept in status() (the chunk then
// contributes nothing and a zero gradient) and must be checked by the caller
// after the engine call — the helpers below do.
//
// Host <-> device copies of the [n] scratch rows use Backend::Cast (a plain
// copy for equal dtypes).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/engine/token_loss.h"

namespace sbp {

// [T] f32 device scratch for LogProbsForward / LogProbsBackward, with host
// staging. Rows of chunk [begin, begin + n) are the scratch rows of the same
// positions.
class LogProbScratch {
 public:
  explicit LogProbScratch(int64_t tokens) : tokens_(tokens) {}

  int64_t tokens() const { return tokens_; }
  const absl::Status& status() const { return status_; }

  // logprobs[begin + r] = log p(targets[r]) for the chunk's rows (0 where
  // ignored); also keeps the chunk's logsumexp for Backward. False (and
  // status() set) when the scratch could not be allocated.
  bool Forward(Backend& backend, const Tensor& logits, const Tensor& targets, int64_t begin,
               float* logprobs);
  // logits <- gradient of sum_r dlogprobs[begin + r] * logp_{begin + r}, in
  // place (ignored rows -> 0). Must follow Forward on the same chunk.
  void Backward(Backend& backend, Tensor& logits, const Tensor& targets, int64_t begin,
                const float* dlogprobs);

 private:
  bool Allocate(Backend& backend);

  int64_t tokens_;
  absl::Status status_;
  bool allocated_ = false;
  Tensor logprobs_, lse_, dlogprobs_;  // [T] f32 on the backend's device
};

// A TokenLoss built on log-probabilities: owns the [T] scratch and reports a
// scratch allocation failure in status() (check it after the engine call).
class LogProbTokenLoss : public TokenLoss {
 public:
  explicit LogProbTokenLoss(int64_t tokens) : scratch_(tokens) {}
  const absl::Status& status() const { return scratch_.status(); }
  int64_t tokens() const { return scratch_.tokens(); }

 protected:
  LogProbScratch scratch_;
};

// Records logp_t into (*logprobs)[t] (resized to the sequence length by the
// constructor). Forward returns the chunk's sum of logp_t, so Engine::Forward
// returns the sequence's total log-probability. ForwardBackward records too
// and leaves a zero gradient.
class LogProbRecorder final : public LogProbTokenLoss {
 public:
  LogProbRecorder(int64_t tokens, std::vector<float>* logprobs);
  double ForwardBackward(Backend& backend, Tensor& logits, const Tensor& targets,
                         int64_t begin) override;
  double Forward(Backend& backend, Tensor& logits, const Tensor& targets, int64_t begin) override;

 private:
  std::vector<float>* logprobs_;
};

// loss = sum_t c_t * logp_t with per-position coefficients c_t fixed up front
// (c_t is ignored where the target is ignored); dL/dlogp_t = c_t, so the
// logits gradient of row t is c_t * (onehot(y_t) - softmax(logits_t)).
// When `logprobs` is non-null, logp_t is recorded there as well (resized to
// the sequence length).
class WeightedLogProbLoss final : public LogProbTokenLoss {
 public:
  explicit WeightedLogProbLoss(std::vector<float> coefficients,
                               std::vector<float>* logprobs = nullptr);
  double ForwardBackward(Backend& backend, Tensor& logits, const Tensor& targets,
                         int64_t begin) override;
  double Forward(Backend& backend, Tensor& logits, const Tensor& targets, int64_t begin) override;

 private:
  std::vector<float> coefficients_;
  std::vector<float> own_logprobs_;
  std::vector<float>* logprobs_;
};

// Per-position log-probabilities of `sequence`'s targets (0 where ignored),
// from the engine's chunked forward (nothing stored for backward).
absl::StatusOr<std::vector<float>> TokenLogProbs(Engine& engine, const ModelTensors& weights,
                                                 const TokenSequence& sequence);

// Sum of TokenLogProbs over the valid targets, accumulated in double.
absl::StatusOr<double> SequenceLogProb(Engine& engine, const ModelTensors& weights,
                                       const TokenSequence& sequence);

// Runs `loss` over `sequence` (targets = ShiftedTargets): forward + backward
// into `grads` when `grads` is non-null, forward only otherwise. Returns the
// loss contribution, or the loss's status() when its scratch failed.
absl::StatusOr<double> RunTokenLoss(Engine& engine, const ModelTensors& weights,
                                    const TokenSequence& sequence, LogProbTokenLoss& loss,
                                    ModelTensors* grads);

}  // namespace sbp
