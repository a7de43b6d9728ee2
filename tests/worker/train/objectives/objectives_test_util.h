// Shared set-up of the objective tests: tiny models with a policy and a
// reference, random DPO pairs and GRPO groups, parameter-store arithmetic, an
// independent per-token log-prob recorder (Engine::Forward + the backend's
// LogProbsForward, no objective code) and a directional-derivative check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tests/worker/engine/engine_test_util.h"
#include "worker/train/jsonl_data.h"

namespace sbp::objectives_testing {

using ::sbp::testing::ExpectGradientsClose;
using ::sbp::testing::TestModel;

inline std::vector<int32_t> RandomIds(int n, uint64_t seed, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  if (n == 0) return ids;
  Tensor t = Tensor::Wrap(ids.data(), {n}, DType::kI32);
  FillIntegers(t, seed, 0, static_cast<int32_t>(vocab));
  return ids;
}

// prompt + response with the prompt masked (independent of the data loader).
inline TokenSequence PromptResponse(const std::vector<int32_t>& prompt,
                                    const std::vector<int32_t>& response) {
  TokenSequence s;
  s.input_ids = prompt;
  s.input_ids.insert(s.input_ids.end(), response.begin(), response.end());
  s.labels.assign(prompt.size(), kIgnoreIndex);
  s.labels.insert(s.labels.end(), response.begin(), response.end());
  return s;
}

inline DpoPair MakePair(const ModelConfig& config, int prompt, int chosen, int rejected,
                        uint64_t seed) {
  const std::vector<int32_t> p = RandomIds(prompt, seed * 7 + 1, config.vocab_size);
  DpoPair pair;
  pair.chosen = PromptResponse(p, RandomIds(chosen, seed * 7 + 2, config.vocab_size));
  pair.rejected = PromptResponse(p, RandomIds(rejected, seed * 7 + 3, config.vocab_size));
  return pair;
}

inline GrpoGroup MakeGroup(const ModelConfig& config, int prompt, const std::vector<int>& lengths,
                           const std::vector<double>& rewards, uint64_t seed) {
  GrpoGroup group;
  group.prompt = RandomIds(prompt, seed * 13 + 1, config.vocab_size);
  for (size_t i = 0; i < lengths.size(); ++i) {
    GrpoCompletion c;
    c.ids = RandomIds(lengths[i], seed * 13 + 2 + i, config.vocab_size);
    c.reward = rewards[i];
    group.completions.push_back(std::move(c));
  }
  return group;
}

// ---- parameter stores ------------------------------------------------------

inline ParameterStore NewStore(TestModel& model, absl::string_view what) {
  auto store = ParameterStore::Create(model.config, model.allocator, what);
  CHECK_OK(store.status());
  return *std::move(store);
}

inline void CopyStore(const ParameterStore& from, ParameterStore& to) {
  for (size_t g = 0; g < from.groups().size(); ++g) {
    const Tensor& src = from.groups()[g].flat;
    Tensor& dst = to.groups()[g].flat;
    std::copy(src.data<float>(), src.data<float>() + src.numel(), dst.data<float>());
  }
}

// y += alpha * x over every parameter.
inline void AddScaled(ParameterStore& y, double alpha, const ParameterStore& x) {
  for (size_t g = 0; g < y.groups().size(); ++g) {
    float* py = y.groups()[g].flat.data<float>();
    const float* px = x.groups()[g].flat.data<float>();
    for (int64_t i = 0; i < y.groups()[g].flat.numel(); ++i) {
      py[i] = static_cast<float>(py[i] + alpha * px[i]);
    }
  }
}

inline double Dot(const ParameterStore& a, const ParameterStore& b) {
  double sum = 0;
  for (size_t g = 0; g < a.groups().size(); ++g) {
    const float* pa = a.groups()[g].flat.data<float>();
    const float* pb = b.groups()[g].flat.data<float>();
    for (int64_t i = 0; i < a.groups()[g].flat.numel(); ++i) {
      sum += static_cast<double>(pa[i]) * pb[i];
    }
  }
  return sum;
}

inline void FillRandom(ParameterStore& store, uint64_t seed, float std) {
  for (size_t g = 0; g < store.groups().size(); ++g) {
    FillNormal(store.groups()[g].flat, seed * 101 + g, 0.0f, std);
  }
}

inline double MaxAbs(const ParameterStore& store) {
  double m = 0;
  for (const ParameterGroup& g : store.groups()) {
    const float* p = g.flat.data<float>();
    for (int64_t i = 0; i < g.flat.numel(); ++i) m = std::max(m, std::fabs(double{p[i]}));
  }
  return m;
}

// ---- independent log-probs -----------------------------------------------

// Records log softmax(logits_t)[target_t] per position with the backend's
// LogProbsForward on [n] scratch of each chunk (no objective code).
class NaiveRecorder final : public TokenLoss {
 public:
  explicit NaiveRecorder(std::vector<double>* out) : out_(out) {}
  double ForwardBackward(Backend&, Tensor&, const Tensor&, int64_t) override {
    ADD_FAILURE() << "NaiveRecorder is forward-only";
    return 0;
  }
  double Forward(Backend& backend, Tensor& logits, const Tensor& targets, int64_t begin) override {
    const int64_t n = targets.numel();
    auto lp = Tensor::Empty(backend.allocator(), {n}, DType::kF32);
    auto lse = Tensor::Empty(backend.allocator(), {n}, DType::kF32);
    CHECK_OK(lp.status());
    CHECK_OK(lse.status());
    backend.LogProbsForward(logits, targets, *lp, *lse);
    for (int64_t r = 0; r < n; ++r) (*out_)[begin + r] = lp->data<float>()[r];
    return 0;
  }

 private:
  std::vector<double>* out_;
};

// Per-position target log-probs of `s` (0 where the target is ignored).
inline std::vector<double> NaiveLogProbs(Engine& engine, const ModelTensors& weights,
                                         const TokenSequence& s) {
  const int64_t n = static_cast<int64_t>(s.input_ids.size());
  std::vector<int32_t> ids = s.input_ids;
  std::vector<int32_t> targets(n, kIgnoreIndex);
  for (int64_t t = 0; t + 1 < n; ++t) targets[t] = s.labels[t + 1];
  std::vector<double> out(n, 0.0);
  NaiveRecorder recorder(&out);
  Tensor ids_t = Tensor::Wrap(ids.data(), {n}, DType::kI32);
  Tensor targets_t = Tensor::Wrap(targets.data(), {n}, DType::kI32);
  CHECK_OK(engine.Forward(weights, ids_t, targets_t, recorder).status());
  for (int64_t t = 0; t < n; ++t) {
    if (targets[t] == kIgnoreIndex) out[t] = 0;
  }
  return out;
}

inline double NaiveSum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

// ---- directional derivatives -------------------------------------------

// Central difference (L(w + hU) - L(w - hU)) / 2h with Richardson
// extrapolation over h and h/2 (cancels the h^2 term). `weights` is
// perturbed in place and restored exactly from a copy.
inline double DirectionalDerivative(TestModel& model, ParameterStore& weights,
                                    const ParameterStore& u, double h,
                                    const std::function<double(const ModelTensors&)>& loss) {
  ParameterStore saved = NewStore(model, "saved weights");
  CopyStore(weights, saved);
  auto central = [&](double step) {
    AddScaled(weights, step, u);
    const double plus = loss(BindModelTensors(weights));
    CopyStore(saved, weights);
    AddScaled(weights, -step, u);
    const double minus = loss(BindModelTensors(weights));
    CopyStore(saved, weights);
    return (plus - minus) / (2 * step);
  };
  const double d1 = central(h), d2 = central(h / 2);
  return (4 * d2 - d1) / 3;
}

// Relative error |fd - <g, U>| / max(|fd|, |<g, U>|) for `directions` random
// directions U (entries N(0, u_std^2)); returns the largest.
inline double WorstDirectionalError(TestModel& model, ParameterStore& weights,
                                    const ParameterStore& grads, int directions, float u_std,
                                    double h,
                                    const std::function<double(const ModelTensors&)>& loss,
                                    uint64_t seed) {
  double worst = 0;
  for (int d = 0; d < directions; ++d) {
    ParameterStore u = NewStore(model, "direction");
    FillRandom(u, seed + d, u_std);
    const double analytic = Dot(grads, u);
    const double numeric = DirectionalDerivative(model, weights, u, h, loss);
    const double err =
        std::fabs(numeric - analytic) / std::max({std::fabs(numeric), std::fabs(analytic), 1e-30});
    worst = std::max(worst, err);
  }
  return worst;
}

}  // namespace sbp::objectives_testing
