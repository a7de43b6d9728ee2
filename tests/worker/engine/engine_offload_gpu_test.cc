// The memory tiers on a CUDA device (skipped without one):
//   * the transfer queue's copies run on their own stream, after the compute
//     ops issued before them, and into and out of pinned host memory;
//   * the engine's host and disk tiers (pinned copies, the disk tier through
//     its pinned staging) give the device tier's loss and gradients, with
//     every stored input copied out and back once (the prefetch order);
//   * the host tier's device peak is below the device tier's by L - 2
//     inputs at least.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/compute_device.h"
#include "kernels/device_info.h"
#include "tests/worker/engine/engine_test_util.h"
#include "worker/engine/device_store.h"
#include "worker/engine/offload/checkpoint_store.h"

namespace sbp::testing {
namespace {

class OffloadGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (" << CudaSupportSummary() << ")";
  }
};

TEST_F(OffloadGpuTest, CopiesFollowTheComputeAndUsePinnedMemory) {
  auto device = OpenComputeDevice("cuda:0", DType::kF32);
  ASSERT_TRUE(device.ok()) << device.status();
  Backend& backend = *device->backend;
  const int64_t n = int64_t{16} << 20;  // 64 MiB
  auto on_device = Tensor::Empty(backend.allocator(), {n}, DType::kF32, "device");
  auto pinned = Tensor::Empty(backend.host_allocator(), {n}, DType::kF32, "pinned");
  ASSERT_TRUE(on_device.ok() && pinned.ok());
  EXPECT_EQ(backend.host_allocator().current_bytes(), n * 4);
  auto queue = backend.NewTransferQueue();
  // A long GEMM first, then the fill the copy must see: the copy is ordered
  // after every op issued before it was queued.
  auto a = Tensor::Empty(backend.allocator(), {4096, 4096}, DType::kF32, "a");
  auto c = Tensor::Empty(backend.allocator(), {4096, 4096}, DType::kF32, "c");
  ASSERT_TRUE(a.ok() && c.ok());
  backend.Fill(*a, 1.0f);
  for (int i = 0; i < 4; ++i) backend.MatmulXWt(*a, *a, *c, false);
  backend.Fill(*on_device, 3.0f);
  const TransferQueue::Ticket out = queue->Copy(*on_device, *pinned);
  ASSERT_TRUE(queue->WaitOnHost(out).ok());
  const float* host = static_cast<const float*>(pinned->raw_data());
  EXPECT_EQ(host[0], 3.0f);
  EXPECT_EQ(host[n - 1], 3.0f);
  // Back in: ops issued after WaitInCompute read the copied values.
  for (int64_t i = 0; i < n; ++i) static_cast<float*>(pinned->raw_data())[i] = 5.0f;
  const TransferQueue::Ticket in = queue->Copy(*pinned, *on_device);
  ASSERT_TRUE(queue->WaitInCompute(in).ok());
  const double sum = backend.SumSquares(*on_device);
  EXPECT_EQ(sum, 25.0 * static_cast<double>(n));
  EXPECT_EQ(queue->copied_bytes(), 2 * n * 4);
}

// Loss and host gradients with the layer inputs in `tier` on cuda:0.
struct GpuRun {
  ParameterStore grads;
  BatchResult result;
  int64_t device_peak = 0;
  int64_t copied = 0;
};

GpuRun RunTier(TestModel& host, DType dtype, const std::vector<TokenSequence>& batch,
               CheckpointTier tier) {
  auto device = OpenComputeDevice("cuda:0", dtype);
  CHECK_OK(device.status());
  Backend& backend = *device->backend;
  auto weights = CopyStoreToDevice(host.weights, backend, dtype, "weights");
  CHECK_OK(weights.status());
  auto grads = ZeroStoreOnDevice(host.weights, backend, DType::kF32, "gradients");
  CHECK_OK(grads.status());
  std::unique_ptr<CheckpointStore> store;
  if (tier == CheckpointTier::kHost) store = NewHostCheckpointStore(backend);
  if (tier == CheckpointTier::kDisk) {
    const std::string dir = ::testing::TempDir() + "/offload_gpu_disk";
    std::filesystem::create_directories(dir);
    auto disk = NewDiskCheckpointStore(backend, dir);
    CHECK_OK(disk.status());
    store = *std::move(disk);
  }
  Engine engine(host.config, backend, {BackwardMode::kStream, 64, 64});
  engine.set_checkpoint_store(store.get());
  ModelTensors w = BindModelTensors(*weights);
  ModelTensors g = BindModelTensors(*grads);
  device->allocator->ResetPeak();
  const int64_t start = device->allocator->current_bytes();
  auto result = SftForwardBackward(engine, w, batch, g);
  CHECK_OK(result.status());
  backend.Synchronize();
  GpuRun run;
  run.device_peak = device->allocator->peak_bytes() - start;
  run.copied = store ? store->moved_bytes() : 0;
  auto out = ParameterStore::Create(host.config, host.allocator, "gradients from the GPU");
  CHECK_OK(out.status());
  CHECK_OK(CopyStoreToHost(*grads, backend, *out));
  run.grads = *std::move(out);
  run.result = *result;
  return run;
}

TEST_F(OffloadGpuTest, HostAndDiskTiersMatchTheDeviceTier) {
  auto config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  config->num_hidden_layers = 6;
  config->hidden_size = 512;
  config->head_dim = 64;  // the tensor-core attention kernels
  TestModel model(*config, 4);
  const int64_t T = 4096;
  const auto batch = MakeBatch(*config, {static_cast<int>(T), 1000}, 8);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const GpuRun device = RunTier(model, dtype, batch, CheckpointTier::kDevice);
    const int64_t input_bytes = T * config->hidden_size * static_cast<int64_t>(DTypeSize(dtype));
    for (CheckpointTier tier : {CheckpointTier::kHost, CheckpointTier::kDisk}) {
      SCOPED_TRACE(CheckpointTierName(tier));
      const GpuRun run = RunTier(model, dtype, batch, tier);
      EXPECT_EQ(run.result.loss, device.result.loss);
      // The same kernels on the same inputs: equal up to the order of any
      // atomic accumulation (printed when not bit-identical).
      ExpectGradientsClose(run.grads, device.grads, 1e-6, "tier vs device");
      int64_t expected_copies = 0;
      for (const TokenSequence& s : batch) {
        expected_copies += 2 * (config->num_hidden_layers - 1) *
                           static_cast<int64_t>(s.input_ids.size()) * config->hidden_size *
                           static_cast<int64_t>(DTypeSize(dtype));
      }
      EXPECT_EQ(run.copied, expected_copies);
      // L + 1 inputs against two slots; the offloaded pass may peak in a
      // later phase (the dK/dV accumulators), so at least L - 2 inputs.
      EXPECT_GE(device.device_peak - run.device_peak,
                (config->num_hidden_layers - 2) * input_bytes);
    }
  }
}

}  // namespace
}  // namespace sbp::testing
