// Sequence parallelism's CUDA path (the head-split staging copies, attention
// over the gathered K/V, the K/V gradients' return) against the CPU's single
// rank: P ranks as threads on cuda:0, each with its own backend and stream,
// exchanging through device-to-device copies (one GPU cannot hold two NCCL
// ranks of one communicator; tests/worker/dist/nccl_all_to_all_gpu_test.cc
// covers NCCL's all-to-all). The ranks' gradients sum to the CPU's to fp32
// rounding in every mode, for P below (2) and above (4) the KV heads and a
// length P does not divide. Skipped without CUDA or a device.
#include <gtest/gtest.h>

#include <barrier>
#include <string>
#include <thread>
#include <vector>

#include "kernels/compute_device.h"
#include "kernels/device_info.h"
#include "tests/worker/engine/engine_test_util.h"
#include "worker/engine/device_store.h"
#include "worker/engine/sequence_group.h"

namespace sbp::testing {
namespace {

// The group's shared state: each rank's send buffer and figures.
struct ThreadGroupState {
  explicit ThreadGroupState(int size) : sends(size), values(size), barrier(size) {}
  std::vector<const void*> sends;
  std::vector<std::vector<double>> values;
  std::barrier<> barrier;
};

// A SequenceGroup of threads: every rank copies its blocks from the others'
// send buffers on its own stream.
class ThreadSequenceGroup final : public SequenceGroup {
 public:
  ThreadSequenceGroup(ThreadGroupState& state, int position, Backend& backend)
      : state_(state), position_(position), backend_(backend) {}
  int position() const override { return position_; }
  int size() const override { return static_cast<int>(state_.sends.size()); }

  absl::Status AllToAll(const void* send, void* recv, int64_t block_bytes) override {
    backend_.Synchronize();  // the send buffer is written
    state_.sends[position_] = send;
    state_.barrier.arrive_and_wait();
    for (int i = 0; i < size(); ++i) {
      auto* from = static_cast<char*>(const_cast<void*>(state_.sends[i])) + position_ * block_bytes;
      Tensor source = Tensor::Wrap(from, {block_bytes / 2}, DType::kBF16, backend_.device());
      Tensor target = Tensor::Wrap(static_cast<char*>(recv) + i * block_bytes, {block_bytes / 2},
                                   DType::kBF16, backend_.device());
      backend_.Copy(source, target);
    }
    backend_.Synchronize();
    state_.barrier.arrive_and_wait();  // the others' buffers may be reused now
    return absl::OkStatus();
  }

  absl::Status Sum(double* values, int64_t count) override {
    state_.values[position_].assign(values, values + count);
    state_.barrier.arrive_and_wait();
    for (int64_t k = 0; k < count; ++k) {
      values[k] = 0;
      for (int i = 0; i < size(); ++i) values[k] += state_.values[i][k];
    }
    state_.barrier.arrive_and_wait();
    return absl::OkStatus();
  }

 private:
  ThreadGroupState& state_;
  const int position_;
  Backend& backend_;
};

class EngineSequenceParallelGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (" << CudaSupportSummary() << ")";
  }
};

// The sum of P thread ranks' f32 gradients of `batch` on cuda:0, and rank 0's loss.
std::pair<std::vector<double>, double> GroupGradients(TestModel& host, int group_size,
                                                      const std::vector<TokenSequence>& batch,
                                                      EngineOptions options) {
  ThreadGroupState state(group_size);
  std::vector<std::vector<float>> grads(group_size);
  std::vector<double> losses(group_size);
  std::vector<std::thread> threads;
  for (int p = 0; p < group_size; ++p) {
    threads.emplace_back([&, p] {
      auto device = OpenComputeDevice("cuda:0", DType::kF32);
      CHECK_OK(device.status());
      Backend& backend = *device->backend;
      auto weights = CopyStoreToDevice(host.weights, backend, DType::kF32, "weights");
      CHECK_OK(weights.status());
      auto g = ZeroStoreOnDevice(host.weights, backend, DType::kF32, "gradients");
      CHECK_OK(g.status());
      ThreadSequenceGroup group(state, p, backend);
      Engine engine(host.config, backend, options);
      engine.set_sequence_group(&group);
      ModelTensors w = BindModelTensors(*weights);
      ModelTensors gt = BindModelTensors(*g);
      auto result = SftForwardBackward(engine, w, batch, gt);
      CHECK_OK(result.status());
      losses[p] = result->loss;
      CpuAllocator allocator;
      auto out = ParameterStore::Create(host.config, allocator, "gradients from the GPU");
      CHECK_OK(out.status());
      CHECK_OK(CopyStoreToHost(*g, backend, *out));
      for (const auto& [name, t] : out->NamedTensors()) {
        grads[p].insert(grads[p].end(), t.data<float>(), t.data<float>() + t.numel());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<double> sum(grads[0].size(), 0.0);
  for (const auto& rank : grads) {
    for (size_t i = 0; i < rank.size(); ++i) sum[i] += rank[i];
  }
  return {sum, losses[0]};
}

TEST_F(EngineSequenceParallelGpuTest, ThreadRanksSumToTheCpuInEveryMode) {
  for (const char* preset : {"tiny-qwen3", "tiny-llama", "tiny-qwen2"}) {
    auto config = PresetConfig(preset);
    ASSERT_TRUE(config.ok());
    TestModel model(*config, /*seed=*/3);
    const std::vector<TokenSequence> batch = MakeBatch(*config, {48, 37, 3}, /*seed=*/5);
    auto [reference, ref_result] = model.Gradients(batch, {BackwardMode::kFull, 0, 0});
    for (int p : {2, 4}) {
      for (const EngineOptions& options : {EngineOptions{BackwardMode::kFull, 0, 0},
                                           EngineOptions{BackwardMode::kCheckpoint, 0, 0},
                                           EngineOptions{BackwardMode::kStream, 7, 5},
                                           EngineOptions{BackwardMode::kStream, 64, 64}}) {
        const std::string label = std::string(preset) + " P=" + std::to_string(p) + " " +
                                  std::string(BackwardModeName(options.mode)) + " chunk " +
                                  std::to_string(options.chunk_tokens);
        auto [sum, loss] = GroupGradients(model, p, batch, options);
        EXPECT_NEAR(loss, ref_result.loss, 1e-5 * ref_result.loss) << label;
        size_t offset = 0;
        for (const auto& [name, t] : reference.NamedTensors()) {
          double diff = 0, norm = 0;
          for (int64_t i = 0; i < t.numel(); ++i) {
            const double r = t.data<float>()[i], s = sum[offset + i];
            diff += (s - r) * (s - r);
            norm += r * r;
          }
          offset += static_cast<size_t>(t.numel());
          EXPECT_LE(std::sqrt(diff / std::max(norm, 1e-300)), 1e-4) << label << ": " << name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace sbp::testing
