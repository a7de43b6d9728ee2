// A failure an op could not return (Backend::TakeDeferredError: a CUDA op
// whose scratch found no device memory) ends the pass as RESOURCE_EXHAUSTED
// at the engine's next check, before the gradients of the group being
// computed leave through the sink (a ZeRO-2 reduce-scatter): no void
// gradient is ever reduced into another rank's shard. Checks come after the
// LM head, after each layer and after the embedding.
#include <gtest/gtest.h>

#include <vector>

#include "tests/worker/engine/null_backend.h"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"

namespace sbp::testing {
namespace {

// Records the groups released; the gradients stay where they are bound.
class RecordingSink final : public GradientSink {
 public:
  absl::Status BeginPass() override { return absl::OkStatus(); }
  absl::Status Acquire(int, ModelTensors&) override { return absl::OkStatus(); }
  absl::Status Release(int group) override {
    released.push_back(group);
    return absl::OkStatus();
  }
  std::vector<int> released;
};

struct Pass {
  absl::Status status;
  std::vector<int> released;
  int checks = 0;
};

Pass RunPass(BackwardMode mode, int fail_at_check) {
  ModelConfig config = *PresetConfig("tiny-qwen3");
  CpuAllocator allocator;
  NullBackend backend(allocator);
  backend.FailDeferredCheck(fail_at_check);
  ParameterStore weights = *ParameterStore::Create(config, allocator, "weights");
  ParameterStore grads = *ParameterStore::Create(config, allocator, "gradients");
  Engine engine(config, backend, {mode, 16, 16});
  RecordingSink sink;
  engine.set_gradient_sink(&sink);
  TokenSequence sequence;
  for (int t = 0; t < 40; ++t) sequence.input_ids.push_back(t % 17);
  sequence.labels = sequence.input_ids;
  ModelTensors w = BindModelTensors(weights), g = BindModelTensors(grads);
  Pass pass;
  pass.status = SftForwardBackward(engine, w, {sequence}, g).status();
  pass.released = sink.released;
  pass.checks = backend.deferred_checks();
  return pass;
}

TEST(EngineDeferredError, CleanPassChecksAfterHeadEachLayerAndEmbedding) {
  const int L = PresetConfig("tiny-qwen3")->num_hidden_layers;
  for (BackwardMode mode : {BackwardMode::kStream, BackwardMode::kCheckpoint}) {
    Pass pass = RunPass(mode, 0);
    ASSERT_TRUE(pass.status.ok()) << pass.status;
    EXPECT_EQ(pass.checks, L + 2);
    EXPECT_EQ(pass.released.size(), static_cast<size_t>(L + 2));
  }
}

TEST(EngineDeferredError, FailureStopsThePassBeforeTheGroupIsReleased) {
  const int L = PresetConfig("tiny-qwen3")->num_hidden_layers;
  for (BackwardMode mode : {BackwardMode::kStream, BackwardMode::kFull}) {
    for (int fail_at = 1; fail_at <= L + 2; ++fail_at) {
      Pass pass = RunPass(mode, fail_at);
      EXPECT_EQ(pass.status.code(), absl::StatusCode::kResourceExhausted)
          << "check " << fail_at << ": " << pass.status;
      EXPECT_NE(pass.status.message().find("scratch"), std::string::npos) << pass.status;
      // Checks 1 .. fail_at ran; the groups before the failing one were
      // released (final, then layers L-1 down), the failing one was not.
      EXPECT_EQ(pass.checks, fail_at);
      EXPECT_EQ(pass.released.size(), static_cast<size_t>(fail_at - 1)) << "check " << fail_at;
    }
  }
}

}  // namespace
}  // namespace sbp::testing
