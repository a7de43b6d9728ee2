// Shared set-up of the engine tests: a model in a ParameterStore, a batch of
// sequences of unequal lengths with masked spans, and gradient comparison.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/random.h"
#include "kernels/tensor_checks.h"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_io.h"

namespace sbp::testing {

struct TestModel {
  ModelConfig config;
  CpuAllocator allocator;
  std::unique_ptr<CpuBackend> backend;
  ParameterStore weights;

  explicit TestModel(const ModelConfig& c, uint64_t seed = 1) : config(c) {
    backend = std::make_unique<CpuBackend>(allocator);
    auto w = InitModelWeights(config, seed, allocator);
    CHECK_OK(w.status());
    auto store = ParameterStore::FromWeights(*w, allocator, "weights");
    CHECK_OK(store.status());
    weights = *std::move(store);
  }

  // Gradients of the batch loss in `options`' mode, in a fresh store.
  std::pair<ParameterStore, BatchResult> Gradients(const std::vector<TokenSequence>& batch,
                                                   EngineOptions options) {
    auto grads = ParameterStore::Create(config, allocator, "gradients");
    CHECK_OK(grads.status());
    Engine engine(config, *backend, options);
    ModelTensors w = BindModelTensors(weights);
    ModelTensors g = BindModelTensors(*grads);
    auto result = SftForwardBackward(engine, w, batch, g);
    CHECK_OK(result.status());
    return {*std::move(grads), *result};
  }
};

// Sequences of the given lengths with random ids; labels = ids except -100 on
// a prompt prefix (a third of the sequence) and on a short interior span.
inline std::vector<TokenSequence> MakeBatch(const ModelConfig& config,
                                            const std::vector<int>& lengths, uint64_t seed) {
  std::vector<TokenSequence> batch;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int n = lengths[i];
    TokenSequence s;
    s.input_ids.resize(n);
    Tensor ids = Tensor::Wrap(s.input_ids.data(), {n}, DType::kI32);
    FillIntegers(ids, seed * 31 + i, 0, static_cast<int32_t>(config.vocab_size));
    s.labels = s.input_ids;
    for (int t = 0; t < n / 3; ++t) s.labels[t] = kIgnoreIndex;
    for (int t = n / 2; t < n / 2 + n / 6; ++t) s.labels[t] = kIgnoreIndex;
    batch.push_back(std::move(s));
  }
  return batch;
}

// Per-tensor normwise relative error of every gradient against `reference`.
inline void ExpectGradientsClose(const ParameterStore& actual, const ParameterStore& reference,
                                 double tolerance, const std::string& label) {
  auto a = actual.NamedTensors();
  auto r = reference.NamedTensors();
  ASSERT_EQ(a.size(), r.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(CheckFinite(a[i].second, a[i].first).ok()) << label;
    const double err = RelativeError(a[i].second, r[i].second);
    EXPECT_LE(err, tolerance) << label << ": " << a[i].first;
    EXPECT_GT(cpu::SumSquares(r[i].second), 0.0) << label << ": zero reference gradient for "
                                            << a[i].first;
  }
}

}  // namespace sbp::testing
