// The ZeRO-2 training tests' inputs: a tiny Qwen3 model written to disk and
// the example job of an objective (examples/jobs/tiny-<objective>.yaml) on
// that model and the example data.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "tests/worker/train/test_util.h"
#include "worker/model/model_io.h"
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

}  // namespace sbp::dist_testing
