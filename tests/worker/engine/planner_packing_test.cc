// The planner and packed sequences: on the CPU a packed step's allocator peak
// is the planned peak of the same tokens (the offsets are host memory);
// on CUDA the offsets sit beside the token ids; bad counts name the field.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/engine/planner.h"
#include "worker/train/packing.h"

namespace sbp {
namespace {

TEST(PlannerPackingTest, PackedCpuStepPeaksWhereThePlanSays) {
  auto config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  CpuAllocator allocator;
  CpuBackend backend(allocator);
  auto weights = ParameterStore::Create(*config, allocator, "weights");
  auto grads = ParameterStore::Create(*config, allocator, "gradients");
  ASSERT_TRUE(weights.ok() && grads.ok());
  const int64_t T = 300;
  TokenSequence sequence;
  for (int64_t t = 0; t < T; ++t) {
    sequence.input_ids.push_back(static_cast<int32_t>((t * 7919 + 11) % config->vocab_size));
  }
  sequence.labels = sequence.input_ids;
  const std::vector<TokenSequence> packed = PackSequences(SplitIntoExamples(sequence, 16), T);
  ASSERT_EQ(packed.size(), 1u);
  for (const EngineOptions& options :
       {EngineOptions{BackwardMode::kStream, 64, 32}, EngineOptions{BackwardMode::kFull, 0, 0}}) {
    PlanRequest r;
    r.config = *config;
    r.seq_len = T;
    r.mode = options.mode;
    r.chunk_tokens = options.chunk_tokens;
    r.logits_chunk_tokens = options.logits_chunk_tokens;
    r.optimizer_state = false;
    r.packed_documents = 16;
    auto plan = PlanMemory(r);
    ASSERT_TRUE(plan.ok()) << plan.status();
    Engine engine(*config, backend, options);
    ModelTensors w = BindModelTensors(*weights);
    ModelTensors g = BindModelTensors(*grads);
    allocator.ResetPeak();
    ASSERT_TRUE(SftForwardBackward(engine, w, packed, g).ok());
    EXPECT_EQ(plan->peak_bytes, allocator.peak_bytes()) << BackwardModeName(options.mode);
    EXPECT_EQ(plan->Term("document_offsets"), 0);
  }
}

TEST(PlannerPackingTest, CudaCountsTheOffsetsBesideTheTokenIds) {
  PlanRequest r;
  r.config = *PresetConfig("tiny-qwen3");
  r.seq_len = 4096;
  r.device = DeviceKind::kCuda;
  r.precision = DType::kBF16;
  auto plain = PlanMemory(r);
  r.packed_documents = 16;
  auto packed = PlanMemory(r);
  ASSERT_TRUE(plain.ok() && packed.ok());
  EXPECT_EQ(packed->Term("document_offsets"), 17 * 4);
  EXPECT_GT(packed->peak_bytes, plain->peak_bytes);
  EXPECT_LE(packed->peak_bytes - plain->peak_bytes, 2 * 256);
  r.packed_documents = -1;
  const absl::Status bad = ValidatePlanRequest(r);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("packed_documents"), std::string::npos) << bad;
}

}  // namespace
}  // namespace sbp
