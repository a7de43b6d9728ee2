#include "worker/train/objectives/sequence_logprobs.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace sbp {

bool LogProbScratch::Allocate(Backend& backend) {
  if (allocated_) return true;
  if (!status_.ok()) return false;
  const char* names[3] = {"objective log-probs", "objective logsumexp", "objective dlogprobs"};
  Tensor* tensors[3] = {&logprobs_, &lse_, &dlogprobs_};
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Tensor> t = Tensor::Empty(backend.allocator(), {tokens_}, DType::kF32, names[i]);
    if (!t.ok()) {
      status_ = t.status();
      return false;
    }
    *tensors[i] = *std::move(t);
  }
  allocated_ = true;
  return true;
}

bool LogProbScratch::Forward(Backend& backend, const Tensor& logits, const Tensor& targets,
                             int64_t begin, float* logprobs) {
  const int64_t n = targets.numel();
  CHECK_EQ(logits.dim(0), n) << "logits and targets rows differ";
  CHECK(begin >= 0 && begin + n <= tokens_)
      << "chunk [" << begin << ", " << begin + n << ") outside a sequence of " << tokens_;
  if (!Allocate(backend)) return false;
  Tensor lp = logprobs_.Rows(begin, begin + n);
  Tensor lse = lse_.Rows(begin, begin + n);
  backend.LogProbsForward(logits, targets, lp, lse);
  Tensor host = Tensor::Wrap(logprobs + begin, {n}, DType::kF32);
  backend.Copy(lp, host);  // device (or host) -> host; both f32
  return true;
}

void LogProbScratch::Backward(Backend& backend, Tensor& logits, const Tensor& targets,
                              int64_t begin, const float* dlogprobs) {
  CHECK(allocated_) << "LogProbScratch::Backward before Forward";
  const int64_t n = targets.numel();
  Tensor dlp = dlogprobs_.Rows(begin, begin + n);
  // Copy reads its source only; the host coefficients are not modified.
  Tensor host = Tensor::Wrap(const_cast<float*>(dlogprobs + begin), {n}, DType::kF32);
  backend.Copy(host, dlp);
  backend.LogProbsBackward(logits, targets, lse_.Rows(begin, begin + n), dlp);
}

namespace {

double SumRange(const std::vector<float>& values, int64_t begin, int64_t n) {
  double sum = 0;
  for (int64_t t = begin; t < begin + n; ++t) sum += values[t];
  return sum;
}

}  // namespace

LogProbRecorder::LogProbRecorder(int64_t tokens, std::vector<float>* logprobs)
    : LogProbTokenLoss(tokens), logprobs_(logprobs) {
  CHECK(logprobs != nullptr);
  logprobs_->assign(static_cast<size_t>(tokens), 0.0f);
}

double LogProbRecorder::Forward(Backend& backend, Tensor& logits, const Tensor& targets,
                                int64_t begin) {
  if (!scratch_.Forward(backend, logits, targets, begin, logprobs_->data())) return 0;
  return SumRange(*logprobs_, begin, targets.numel());
}

double LogProbRecorder::ForwardBackward(Backend& backend, Tensor& logits, const Tensor& targets,
                                        int64_t begin) {
  const double sum = Forward(backend, logits, targets, begin);
  backend.Fill(logits, 0.0f);
  return sum;
}

WeightedLogProbLoss::WeightedLogProbLoss(std::vector<float> coefficients,
                                         std::vector<float>* logprobs)
    : LogProbTokenLoss(static_cast<int64_t>(coefficients.size())),
      coefficients_(std::move(coefficients)),
      logprobs_(logprobs != nullptr ? logprobs : &own_logprobs_) {
  logprobs_->assign(coefficients_.size(), 0.0f);
}

double WeightedLogProbLoss::Forward(Backend& backend, Tensor& logits, const Tensor& targets,
                                    int64_t begin) {
  if (!scratch_.Forward(backend, logits, targets, begin, logprobs_->data())) return 0;
  // Ignored rows have logp = 0, so their coefficient does not matter.
  double loss = 0;
  for (int64_t t = begin; t < begin + targets.numel(); ++t) {
    loss += static_cast<double>(coefficients_[t]) * (*logprobs_)[t];
  }
  return loss;
}

double WeightedLogProbLoss::ForwardBackward(Backend& backend, Tensor& logits, const Tensor& targets,
                                            int64_t begin) {
  if (!scratch_.Forward(backend, logits, targets, begin, logprobs_->data())) {
    backend.Fill(logits, 0.0f);
    return 0;
  }
  double loss = 0;
  for (int64_t t = begin; t < begin + targets.numel(); ++t) {
    loss += static_cast<double>(coefficients_[t]) * (*logprobs_)[t];
  }
  scratch_.Backward(backend, logits, targets, begin, coefficients_.data());
  return loss;
}

absl::StatusOr<double> RunTokenLoss(Engine& engine, const ModelTensors& weights,
                                    const TokenSequence& sequence, LogProbTokenLoss& loss,
                                    ModelTensors* grads) {
  const int64_t n = static_cast<int64_t>(sequence.input_ids.size());
  if (n == 0) return absl::InvalidArgumentError("empty sequence");
  if (static_cast<int64_t>(sequence.labels.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence has ", n, " input_ids but ", sequence.labels.size(), " labels"));
  }
  CHECK_EQ(loss.tokens(), n) << "TokenLoss built for another sequence length";
  ASSIGN_OR_RETURN(const SequenceTensors t, SequenceOnDevice(engine.backend(), sequence));
  double value = 0;
  if (grads != nullptr) {
    ASSIGN_OR_RETURN(value, engine.ForwardBackward(weights, t.ids_t, t.targets_t, loss, *grads));
  } else {
    ASSIGN_OR_RETURN(value, engine.Forward(weights, t.ids_t, t.targets_t, loss));
  }
  RETURN_IF_ERROR(loss.status());
  return value;
}

absl::StatusOr<std::vector<float>> TokenLogProbs(Engine& engine, const ModelTensors& weights,
                                                 const TokenSequence& sequence) {
  std::vector<float> logprobs;
  LogProbRecorder recorder(static_cast<int64_t>(sequence.input_ids.size()), &logprobs);
  RETURN_IF_ERROR(RunTokenLoss(engine, weights, sequence, recorder, nullptr).status());
  return logprobs;
}

absl::StatusOr<double> SequenceLogProb(Engine& engine, const ModelTensors& weights,
                                       const TokenSequence& sequence) {
  // The recorder's chunk sums (ignored rows record 0), added by the engine;
  // under sequence parallelism the engine adds the group's rows too, while
  // the recorded per-token values are this rank's rows only.
  std::vector<float> logprobs;
  LogProbRecorder recorder(static_cast<int64_t>(sequence.input_ids.size()), &logprobs);
  return RunTokenLoss(engine, weights, sequence, recorder, nullptr);
}

}  // namespace sbp
