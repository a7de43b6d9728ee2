// The ZeRO-2 training tests' inputs: a tiny Qwen3 model written to disk and
// the example job of an objective (examples/jobs/tiny-<objective>.yaml) on
// that model and the example data.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/worker/train/test_util.h"
#include "worker/model/model_io.h"
#include "worker/model/safetensors.h"
#include "worker/train/job_spec.h"

namespace sbp::dist_testing {

// tiny-qwen3 with weights drawn from `seed`, as an f32 model directory.
inline void SaveTinyModel(const std::string& dir, uint64_t seed) {
  auto config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  CpuAllocator allocator;
  auto weights = InitModelWeights(*config, seed, allocator);
  ASSERT_TRUE(weights.ok());
  ASSERT_TRUE(SaveModelDirectory(dir, *weights, DType::kF32).ok());
}

// The example job of `objective` training `model_dir` (also its reference)
// on examples/data/tiny-<objective>.jsonl.
inline JobSpec ExampleJobSpec(const std::string& objective, const std::string& model_dir) {
  const std::string source = train_testing::SourceDir();
  std::ifstream in(source + "/examples/jobs/tiny-" + objective + ".yaml");
  std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto parsed = ParseJobSpec(yaml, objective);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  JobSpec spec = parsed.ok() ? *parsed : JobSpec{};
  spec.model = model_dir;
  spec.data = source + "/examples/data/tiny-" + objective + ".jsonl";
  spec.dpo.reference = spec.model;
  spec.grpo.reference = spec.model;
  return spec;
}

// A checkpoint's model weights, or its LoRA adapters (adapter_model.safetensors).
inline NamedTensors LoadCheckpointTensors(const std::string& checkpoint, bool adapters,
                                          CpuAllocator& allocator) {
  NamedTensors out;
  if (!adapters) {
    auto weights = LoadModelDirectory(checkpoint, allocator);
    EXPECT_TRUE(weights.ok()) << weights.status();
    return weights.ok() ? weights->params : out;
  }
  auto file = SafetensorsFile::Open(checkpoint + "/adapter_model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return out;
  for (const std::string& name : file->names()) {
    auto t = file->ReadAsF32(name, allocator);
    EXPECT_TRUE(t.ok()) << name;
    if (t.ok()) out.emplace_back(name, *t);
  }
  return out;
}

// The same tensors, each within `tolerance` of `expected` in relative
// (normwise) distance.
inline void ExpectTensorsClose(const NamedTensors& expected, const NamedTensors& actual,
                               double tolerance) {
  ASSERT_EQ(expected.size(), actual.size());
  ASSERT_FALSE(expected.empty());
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [name, e] = expected[i];
    ASSERT_EQ(name, actual[i].first);
    const float* x = actual[i].second.data<float>();
    const float* y = e.data<float>();
    double diff = 0, norm = 0;
    for (int64_t j = 0; j < e.numel(); ++j) {
      diff += (double(x[j]) - y[j]) * (double(x[j]) - y[j]);
      norm += double(y[j]) * y[j];
    }
    EXPECT_LE(std::sqrt(diff / norm), tolerance) << name;
  }
}

}  // namespace sbp::dist_testing
