#include "kernels/cpu/cross_entropy.h"

#include "kernels/cpu/op_checks.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace sbp::cpu {
namespace {



// Checks logits [N, V] against targets [N] (and every target); returns V.
int64_t CheckLogits(const Tensor& logits, const Tensor& targets) {
  CheckHost(logits, DType::kF32, "logits");
  CheckHost(targets, DType::kI32, "targets");
  CHECK(logits.rank() >= 1 && logits.dim(-1) > 0 &&
        logits.numel() == targets.numel() * logits.dim(-1))
      << "logits " << logits.DebugString() << " must be [N, V] for targets "
      << targets.DebugString();
  const int64_t vocab = logits.dim(-1);
  const int32_t* t = targets.data<int32_t>();
  for (int64_t r = 0; r < targets.numel(); ++r) {
    CHECK(t[r] == kIgnoreIndex || (t[r] >= 0 && t[r] < vocab))
        << "target " << t[r] << " of row " << r << " is outside the vocabulary of size " << vocab
        << " (and is not the ignore index " << kIgnoreIndex << ")";
  }
  return vocab;
}

void CheckPerRow(const Tensor& t, const Tensor& targets, const char* name) {
  CheckHost(t, DType::kF32, name);
  CHECK_EQ(t.numel(), targets.numel())
      << name << " " << t.DebugString() << " must have one value per target of "
      << targets.DebugString();
}

float RowMax(const float* l, int64_t v) {
  float m = l[0];
  for (int64_t j = 1; j < v; ++j) m = l[j] > m ? l[j] : m;
  return m;
}

// log(sum_j exp(l_j - m)), the exps in float and their sum in double.
double LogSumExpShifted(const float* l, int64_t v, float m) {
  double sum = 0.0;
  for (int64_t j = 0; j < v; ++j) sum += std::exp(l[j] - m);
  return std::log(sum);
}

}  // namespace

double CrossEntropyForwardBackward(Tensor& logits, const Tensor& targets, float scale) {
  const int64_t v = CheckLogits(logits, targets);
  const int64_t n = targets.numel();
  const int32_t* t = targets.data<int32_t>();
  float* ls = logits.data<float>();
  std::vector<double> row_loss(static_cast<size_t>(n), 0.0);
#pragma omp parallel for schedule(static) if (n * v >= kParallelMinElements)
  for (int64_t r = 0; r < n; ++r) {
    float* l = ls + r * v;
    if (t[r] == kIgnoreIndex) {
      std::memset(l, 0, static_cast<size_t>(v) * sizeof(float));
      continue;
    }
    const float m = RowMax(l, v);
    const double log_sum = LogSumExpShifted(l, v, m);
    row_loss[r] = log_sum - static_cast<double>(l[t[r]] - m);
    const float log_sum_f = static_cast<float>(log_sum);
    for (int64_t j = 0; j < v; ++j) l[j] = scale * std::exp((l[j] - m) - log_sum_f);
    l[t[r]] -= scale;
  }
  double loss = 0.0;
  for (int64_t r = 0; r < n; ++r) loss += row_loss[r];
  return loss;
}

void LogProbsForward(const Tensor& logits, const Tensor& targets, Tensor& logprobs, Tensor& lse) {
  const int64_t v = CheckLogits(logits, targets);
  CheckPerRow(logprobs, targets, "logprobs");
  CheckPerRow(lse, targets, "lse");
  const int64_t n = targets.numel();
  const int32_t* t = targets.data<int32_t>();
  const float* ls = logits.data<float>();
  float* lp = logprobs.data<float>();
  float* lse_out = lse.data<float>();
#pragma omp parallel for schedule(static) if (n * v >= kParallelMinElements)
  for (int64_t r = 0; r < n; ++r) {
    if (t[r] == kIgnoreIndex) {
      lp[r] = 0.0f;
      lse_out[r] = 0.0f;
      continue;
    }
    const float* l = ls + r * v;
    const float m = RowMax(l, v);
    const double log_sum = LogSumExpShifted(l, v, m);
    lp[r] = static_cast<float>(static_cast<double>(l[t[r]] - m) - log_sum);
    lse_out[r] = static_cast<float>(static_cast<double>(m) + log_sum);
  }
}

void LogProbsBackward(Tensor& logits, const Tensor& targets, const Tensor& lse,
                      const Tensor& dlogprobs) {
  const int64_t v = CheckLogits(logits, targets);
  CheckPerRow(lse, targets, "lse");
  CheckPerRow(dlogprobs, targets, "dlogprobs");
  const int64_t n = targets.numel();
  const int32_t* t = targets.data<int32_t>();
  const float* lse_in = lse.data<float>();
  const float* dlp = dlogprobs.data<float>();
  float* ls = logits.data<float>();
#pragma omp parallel for schedule(static) if (n * v >= kParallelMinElements)
  for (int64_t r = 0; r < n; ++r) {
    float* l = ls + r * v;
    if (t[r] == kIgnoreIndex) {
      std::memset(l, 0, static_cast<size_t>(v) * sizeof(float));
      continue;
    }
    const float c = dlp[r];
    const float row_lse = lse_in[r];
    for (int64_t j = 0; j < v; ++j) l[j] = -c * std::exp(l[j] - row_lse);
    l[t[r]] += c;
  }
}

}  // namespace sbp::cpu
