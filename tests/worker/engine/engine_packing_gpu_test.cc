// Packed sequences on a CUDA device: the loss and gradients of documents
// packed into one sequence (document offsets on the device) equal those of
// the separate sequences on the CPU (fp32, the reference), in every mode and
// chunking with chunks inside documents; with bf16 activations and head_dim
// 64 and 128 (the tensor-core attention kernels) the packed gradients are no
// further from the reference than the separate sequences' bf16 gradients.
// Skipped without CUDA or a device.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/compute_device.h"
#include "kernels/device_info.h"
#include "tests/worker/engine/engine_test_util.h"
#include "worker/engine/device_store.h"
#include "worker/train/packing.h"

namespace sbp::testing {
namespace {

class EnginePackingGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (" << CudaSupportSummary() << ")";
  }
};

std::pair<ParameterStore, BatchResult> GpuGradients(TestModel& host, DType dtype,
                                                    const std::vector<TokenSequence>& batch,
                                                    EngineOptions options) {
  auto device = OpenComputeDevice("cuda:0", dtype);
  CHECK_OK(device.status());
  Backend& backend = *device->backend;
  auto weights = CopyStoreToDevice(host.weights, backend, dtype, "weights");
  CHECK_OK(weights.status());
  auto grads = ZeroStoreOnDevice(host.weights, backend, DType::kF32, "gradients");
  CHECK_OK(grads.status());
  Engine engine(host.config, backend, options);
  ModelTensors w = BindModelTensors(*weights);
  ModelTensors g = BindModelTensors(*grads);
  auto result = SftForwardBackward(engine, w, batch, g);
  CHECK_OK(result.status());
  auto out = ParameterStore::Create(host.config, host.allocator, "gradients from the GPU");
  CHECK_OK(out.status());
  CHECK_OK(CopyStoreToHost(*grads, backend, *out));
  return {*std::move(out), *result};
}

double AllRelativeError(const ParameterStore& got, const ParameterStore& want) {
  double diff = 0, ref = 0;
  auto g = got.NamedTensors();
  auto w = want.NamedTensors();
  for (size_t i = 0; i < g.size(); ++i) {
    const float* a = g[i].second.data<float>();
    const float* b = w[i].second.data<float>();
    for (int64_t j = 0; j < g[i].second.numel(); ++j) {
      diff += (double{a[j]} - b[j]) * (double{a[j]} - b[j]);
      ref += double{b[j]} * b[j];
    }
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

TEST_F(EnginePackingGpuTest, F32PackedEqualsSeparateOnTheCpuInEveryMode) {
  for (const char* preset : {"tiny-qwen3", "tiny-llama", "tiny-qwen2"}) {
    SCOPED_TRACE(preset);
    auto config = PresetConfig(preset);
    ASSERT_TRUE(config.ok());
    TestModel model(*config, /*seed=*/3);
    const std::vector<TokenSequence> docs = MakeBatch(*config, {29, 13, 1, 2, 40, 70}, 5);
    auto [reference, ref_result] = model.Gradients(docs, {BackwardMode::kFull, 0, 0});
    const std::vector<TokenSequence> packed = PackSequences(docs, 155);
    ASSERT_EQ(packed.size(), 1u);
    for (const EngineOptions& options :
         {EngineOptions{BackwardMode::kFull, 0, 0}, EngineOptions{BackwardMode::kCheckpoint, 0, 0},
          EngineOptions{BackwardMode::kStream, 7, 5}, EngineOptions{BackwardMode::kStream, 1, 1},
          EngineOptions{BackwardMode::kStream, 64, 64}}) {
      const std::string label = std::string(BackwardModeName(options.mode)) + " chunk " +
                                std::to_string(options.chunk_tokens);
      auto [grads, result] = GpuGradients(model, DType::kF32, packed, options);
      EXPECT_NEAR(result.loss, ref_result.loss, 1e-5 * ref_result.loss) << label;
      ExpectGradientsClose(grads, reference, 1e-4, label);
    }
  }
}

TEST_F(EnginePackingGpuTest, Bf16PackedIsAsAccurateAsBf16Separate) {
  for (int64_t head_dim : {int64_t{64}, int64_t{128}}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    ModelConfig config = *PresetConfig("tiny-qwen3");
    config.head_dim = head_dim;
    TestModel model(config, /*seed=*/7);
    const std::vector<TokenSequence> docs = MakeBatch(config, {100, 37, 150, 3, 90}, 11);
    auto [reference, ref_result] = model.Gradients(docs, {BackwardMode::kFull, 0, 0});
    auto [separate, separate_result] =
        GpuGradients(model, DType::kBF16, docs, {BackwardMode::kFull, 0, 0});
    const double separate_error = AllRelativeError(separate, reference);
    const std::vector<TokenSequence> packed = PackSequences(docs, 380);
    for (const EngineOptions& options :
         {EngineOptions{BackwardMode::kFull, 0, 0}, EngineOptions{BackwardMode::kStream, 96, 64}}) {
      auto [grads, result] = GpuGradients(model, DType::kBF16, packed, options);
      const double error = AllRelativeError(grads, reference);
      EXPECT_LE(error, 1.5 * separate_error + 1e-3) << BackwardModeName(options.mode) << ": packed "
                                                    << error << ", separate " << separate_error;
      EXPECT_NEAR(result.loss, ref_result.loss, 2e-2 * ref_result.loss);
    }
  }
}

}  // namespace
}  // namespace sbp::testing
