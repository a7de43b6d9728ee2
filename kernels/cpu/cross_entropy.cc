#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/op_checks.h"
#include "kernels/cpu/vector_math.h"

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

// The row loops below are compiled for AVX-512, AVX2+FMA and baseline x86-64
// (SBP_CPU_CLONES); exp is vector_math::ExpInline (relative error < 2.5e-7).
// Sums of exps are taken in double in kSumLanes independent accumulators
// (lane k sums the elements j = k mod kSumLanes in order, then the tail and the
// lanes are added in order), so the result is the same on every code path. A
// single double reduction over float terms would not vectorise.
constexpr int64_t kSumLanes = 16;

SBP_CPU_CLONES
float RowMaxOf(const float* l, int64_t v) { return vector_math::RowMax(l, v); }

double SumLanes(const double* acc, double tail) {
  for (int64_t k = 0; k < kSumLanes; ++k) tail += acc[k];
  return tail;
}

// l_j <- exp(l_j - m); returns the sum of the new l_j.
SBP_CPU_CLONES
double ExpShiftInPlace(float* l, int64_t v, float m) {
  double acc[kSumLanes] = {};
  int64_t j = 0;
  for (; j + kSumLanes <= v; j += kSumLanes) {
    float e[kSumLanes];
#pragma omp simd
    for (int64_t k = 0; k < kSumLanes; ++k) {
      e[k] = vector_math::ExpInline(l[j + k] - m);
      l[j + k] = e[k];
    }
#pragma omp simd
    for (int64_t k = 0; k < kSumLanes; ++k) acc[k] += e[k];
  }
  double tail = 0.0;
  for (; j < v; ++j) {
    l[j] = vector_math::ExpInline(l[j] - m);
    tail += l[j];
  }
  return SumLanes(acc, tail);
}

// sum_j exp(l_j - m), l unchanged.
SBP_CPU_CLONES
double ExpShiftSum(const float* l, int64_t v, float m) {
  double acc[kSumLanes] = {};
  int64_t j = 0;
  for (; j + kSumLanes <= v; j += kSumLanes) {
    float e[kSumLanes];
#pragma omp simd
    for (int64_t k = 0; k < kSumLanes; ++k) e[k] = vector_math::ExpInline(l[j + k] - m);
#pragma omp simd
    for (int64_t k = 0; k < kSumLanes; ++k) acc[k] += e[k];
  }
  double tail = 0.0;
  for (; j < v; ++j) tail += vector_math::ExpInline(l[j] - m);
  return SumLanes(acc, tail);
}

// l_j <- c * l_j.
SBP_CPU_CLONES
void ScaleInPlace(float* l, int64_t v, float c) {
#pragma omp simd
  for (int64_t j = 0; j < v; ++j) l[j] *= c;
}

// l_j <- c * exp(l_j - shift) (in blocks of kSumLanes, which vectorise on
// every path).
SBP_CPU_CLONES
void ScaledExpInPlace(float* l, int64_t v, float shift, float c) {
  int64_t j = 0;
  for (; j + kSumLanes <= v; j += kSumLanes) {
    float e[kSumLanes];
#pragma omp simd
    for (int64_t k = 0; k < kSumLanes; ++k) e[k] = vector_math::ExpInline(l[j + k] - shift);
#pragma omp simd
    for (int64_t k = 0; k < kSumLanes; ++k) l[j + k] = c * e[k];
  }
  for (; j < v; ++j) l[j] = c * vector_math::ExpInline(l[j] - shift);
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
    // One exp per logit: l <- exp(l - m), then l <- scale * l / sum.
    const float m = RowMaxOf(l, v);
    const float target_logit = l[t[r]];
    const double sum = ExpShiftInPlace(l, v, m);
    row_loss[r] = std::log(sum) - static_cast<double>(target_logit - m);
    ScaleInPlace(l, v, static_cast<float>(scale / sum));
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
    const float m = RowMaxOf(l, v);
    const double log_sum = std::log(ExpShiftSum(l, v, m));
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
    ScaledExpInPlace(l, v, row_lse, -c);
    l[t[r]] += c;
  }
}

}  // namespace sbp::cpu
