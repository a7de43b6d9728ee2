#include "worker/engine/decode/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "kernels/cpu/vector_math.h"

namespace sbp {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): the increment and output mix.
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// w[i] = exp(scale * (z[i] - top)) for i < n; returns their sum (16
// running float sums: the exps and the sum vectorise).
SBP_CPU_CLONES double ScaledExps(const float* z, int64_t n, float top, float scale, float* w) {
  using cpu::vector_math::ExpInline;
  constexpr int64_t kLanes = 16;
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t u = 0; u < kLanes; ++u) {
      w[i + u] = ExpInline(scale * (z[i + u] - top));
      lanes[u] += w[i + u];
    }
  }
  double sum = 0;
  for (; i < n; ++i) sum += w[i] = ExpInline(scale * (z[i] - top));
  for (int64_t u = 0; u < kLanes; ++u) sum += lanes[u];
  return sum;
}

// The lowest id of the largest logit.
int32_t ArgMax(const float* z, int64_t n) {
  const float top = cpu::vector_math::RowMax(z, n);
  int64_t i = 0;
  while (i + 1 < n && !(z[i] == top)) ++i;
  return static_cast<int32_t>(i);
}

}  // namespace

absl::Status CheckSamplingOptions(const SamplingOptions& o) {
  if (!std::isfinite(o.temperature) || o.temperature < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be a finite number >= 0 (0: greedy), got ", o.temperature));
  }
  if (!std::isfinite(o.top_p) || o.top_p <= 0 || o.top_p > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_p must be in (0, 1] (1: off), got ", o.top_p));
  }
  if (o.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0 (0: off), got ", o.top_k));
  }
  return absl::OkStatus();
}

SamplerStream::SamplerStream(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  // Each coordinate goes through the output mix before it is folded in, so
  // nearby tuples (step 3 vs 4) give unrelated streams.
  state_ = Mix(seed + kGolden);
  state_ = Mix(state_ ^ Mix(a + 1 * kGolden));
  state_ = Mix(state_ ^ Mix(b + 2 * kGolden));
  state_ = Mix(state_ ^ Mix(c + 3 * kGolden));
}

double SamplerStream::NextUniform() {
  state_ += kGolden;
  return static_cast<double>(Mix(state_) >> 11) * 0x1.0p-53;
}

SampledToken TokenSampler::Sample(const float* logits, int64_t vocab, SamplerStream& stream) {
  CHECK_GT(vocab, 0);
  SampledToken out;
  const int32_t best = ArgMax(logits, vocab);
  const float top = logits[best];
  weights_.resize(static_cast<size_t>(vocab));
  // log softmax(z)_id = z_id - top - log sum_i exp(z_i - top).
  const bool tempered = options_.temperature != 0 && options_.temperature != 1;
  const double log_norm = top + std::log(ScaledExps(logits, vocab, top, 1.0f, weights_.data()));
  if (options_.temperature == 0) {
    out.id = best;
    out.logprob = static_cast<float>(logits[best] - log_norm);
    return out;
  }
  // weights_[i] = exp((z_i - max z) / tau): p_i up to the normaliser
  // (softmax(z / tau) over the whole vocabulary; top-p's mass is the full
  // distribution's).
  const double total =
      tempered ? ScaledExps(logits, vocab, top, static_cast<float>(1.0 / options_.temperature),
                            weights_.data())
               : std::exp(log_norm - top);
  // Candidates in order of decreasing p (ties: lower id first). Top-k and
  // top-p need only a prefix of that order, sorted in growing pieces until
  // the prefix holds top_p of the mass.
  int64_t kept = vocab;
  if (options_.top_k > 0 && options_.top_k < vocab) kept = options_.top_k;
  const bool nucleus = options_.top_p < 1.0;
  if (kept == vocab && !nucleus) {
    // Inverse CDF over the whole vocabulary in id order.
    const double u = stream.NextUniform() * total;
    double cumulative = 0;
    int64_t pick = -1;
    for (int64_t i = 0; i < vocab; ++i) {
      cumulative += weights_[i];
      if (u < cumulative) {
        pick = i;
        break;
      }
    }
    // `total` was summed in another order: a u in its last rounding step
    // takes the last id with any weight.
    if (pick < 0) {
      pick = vocab - 1;
      while (pick > 0 && weights_[pick] == 0) --pick;
    }
    out.id = static_cast<int32_t>(pick);
    out.logprob = static_cast<float>(logits[pick] - log_norm);
    return out;
  }
  order_.resize(static_cast<size_t>(vocab));
  std::iota(order_.begin(), order_.end(), 0);
  double kept_mass = total;
  {
    auto before = [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    const double wanted = options_.top_p * total;
    int64_t sorted = nucleus ? std::min<int64_t>(kept, 64) : kept;
    while (true) {
      // The `sorted` first in order: select them, then sort just those.
      if (sorted < vocab)
        std::nth_element(order_.begin(), order_.begin() + sorted, order_.end(), before);
      std::sort(order_.begin(), order_.begin() + sorted, before);
      if (sorted == kept || !nucleus) break;
      double mass = 0;
      for (int64_t i = 0; i < sorted; ++i) mass += weights_[order_[i]];
      if (mass >= wanted) break;
      sorted = std::min(kept, sorted * 8);
    }
    kept_mass = 0;
    int64_t n = 0;
    while (n < sorted) {
      kept_mass += weights_[order_[n++]];
      if (nucleus && kept_mass >= wanted) break;
    }
    kept = n;
  }
  // Inverse CDF over the kept candidates, renormalised.
  const double u = stream.NextUniform() * kept_mass;
  double cumulative = 0;
  int64_t pick = kept - 1;
  for (int64_t i = 0; i < kept; ++i) {
    cumulative += weights_[order_[i]];
    if (u < cumulative) {
      pick = i;
      break;
    }
  }
  out.id = order_[pick];
  out.logprob = static_cast<float>(logits[out.id] - log_norm);
  return out;
}

}  // namespace sbp
