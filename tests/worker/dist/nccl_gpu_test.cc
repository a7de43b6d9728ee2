// NCCL collectives on real GPUs: one rank per device as separate processes
// (all visible devices, at least one), rendezvous through a directory store;
// each rank checks the communicator contract (communicator_contract.h) on
// device memory, as the Gloo test does on host memory. Skipped without a
// CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "tests/worker/dist/communicator_contract.h"
#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/train/test_util.h"
#include "worker/dist/nccl_communicator.h"

namespace sbp {
namespace {

// Device buffers: NCCL's memory.
class DeviceMemory final : public dist_testing::ContractMemory {
 public:
  ~DeviceMemory() override {
    for (float* p : buffers_) cudaFree(p);
  }
  float* Allocate(int64_t n) override {
    float* p = nullptr;
    if (cudaMalloc(&p, static_cast<size_t>(n) * sizeof(float)) != cudaSuccess) std::abort();
    buffers_.push_back(p);
    return p;
  }
  void Upload(const std::vector<float>& values, float* dst) override {
    if (cudaMemcpy(dst, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice) !=
        cudaSuccess) {
      std::abort();
    }
  }
  std::vector<float> Download(const float* src, int64_t n) override {
    std::vector<float> out(static_cast<size_t>(n));
    if (cudaMemcpy(out.data(), src, out.size() * sizeof(float), cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
      std::abort();
    }
    return out;
  }

 private:
  std::vector<float*> buffers_;
};

int RankBody(const std::string& dir, int rank, int n) {
  gloo::rendezvous::FileStore files(dir);
  gloo::rendezvous::PrefixStore store("nccl", files);
  NcclOptions options;
  options.rank = rank;
  options.world_size = n;
  options.device = rank;
  options.timeout = std::chrono::seconds(60);
  auto comm = NcclCommunicator::Connect(store, options);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().ToString().c_str());
    return 1;
  }
  DeviceMemory memory;
  return dist_testing::CheckCommunicatorContract(**comm, memory);
}

// CUDA cannot be used in a child forked after the parent initialised it, so
// the device count comes from a short-lived child of its own.
int CountDevicesInChild() {
  const std::vector<int> code = dist_testing::RunRankProcesses(1, [](int) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? std::min(n, 64) : 0;
  });
  return std::max(code[0], 0);
}

TEST(NcclGpuTest, CollectivesAcrossAllDevices) {
  const int devices = CountDevicesInChild();
  if (devices == 0) GTEST_SKIP() << "no CUDA device";
  const std::string dir = train_testing::MakeTempDir("nccl");
  const std::vector<int> codes = dist_testing::RunRankProcesses(
      devices, [&](int rank) { return RankBody(dir, rank, devices); });
  for (int r = 0; r < devices; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// A collective that fails once enqueued (injected: one device cannot have a
// peer that stays away) goes through the abort path before returning: the
// communicator is aborted, its stream drained, and the buffer the collective
// wrote can be freed and reused at once without a fault.
TEST(NcclGpuTest, FailureAfterEnqueueAbortsBeforeReturning) {
  if (CountDevicesInChild() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string dir = train_testing::MakeTempDir("nccl-enqueue-failure");
  const std::vector<int> codes = dist_testing::RunRankProcesses(1, [&](int) -> int {
    gloo::rendezvous::FileStore files(dir);
    gloo::rendezvous::PrefixStore store("nccl", files);
    NcclOptions options;
    options.timeout = std::chrono::seconds(10);
    options.fail_after_enqueue_for_testing = true;
    auto comm = NcclCommunicator::Connect(store, options);
    if (!comm.ok()) return 2;
    const int64_t n = int64_t{1} << 24;  // 64 MiB: a collective that takes a while
    float* data = nullptr;
    if (cudaMalloc(&data, n * sizeof(float)) != cudaSuccess) return 3;
    const absl::Status s = (*comm)->ReduceScatterSum(data, n, nullptr, nullptr);
    if (s.ok() || s.message().find("reduce-scatter") == absl::string_view::npos) return 4;
    if ((*comm)->aborts() != 1 || !(*comm)->broken()) return 5;
    // Nothing may still write into `data`: free it, reuse the memory, check.
    if (cudaFree(data) != cudaSuccess) return 6;
    float* reused = nullptr;
    if (cudaMalloc(&reused, n * sizeof(float)) != cudaSuccess) return 7;
    if (cudaMemset(reused, 0, n * sizeof(float)) != cudaSuccess) return 8;
    if (cudaDeviceSynchronize() != cudaSuccess) return 9;
    std::vector<float> back(1024, 1.0f);
    if (cudaMemcpy(back.data(), reused, back.size() * sizeof(float), cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
      return 10;
    }
    for (float v : back) {
      if (v != 0.0f) return 11;
    }
    cudaFree(reused);
    // Unusable afterwards, and says so.
    if ((*comm)->Barrier().code() != absl::StatusCode::kFailedPrecondition) return 12;
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
}

// With two devices, a real peer that stops answering: the survivor's
// reduce-scatter times out and aborts before returning.
TEST(NcclGpuTest, SilentPeerTimesOutThroughTheAbortPath) {
  if (CountDevicesInChild() < 2) GTEST_SKIP() << "needs two CUDA devices";
  const std::string dir = train_testing::MakeTempDir("nccl-silent-peer");
  const std::vector<int> codes = dist_testing::RunRankProcesses(2, [&](int rank) -> int {
    gloo::rendezvous::FileStore files(dir);
    gloo::rendezvous::PrefixStore store("nccl", files);
    NcclOptions options;
    options.rank = rank;
    options.world_size = 2;
    options.device = rank;
    options.timeout = std::chrono::seconds(5);
    auto comm = NcclCommunicator::Connect(store, options);
    if (!comm.ok()) return 2;
    if (!(*comm)->Barrier().ok()) return 3;
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(20));  // present, but silent
      _exit(0);
    }
    float* data = nullptr;
    if (cudaMalloc(&data, 2 * 4096 * sizeof(float)) != cudaSuccess) return 4;
    const absl::Status s = (*comm)->ReduceScatterSum(data, 4096, nullptr, nullptr);
    if (s.code() != absl::StatusCode::kDeadlineExceeded) return 5;
    if ((*comm)->aborts() != 1 || !(*comm)->broken()) return 6;
    return cudaFree(data) == cudaSuccess ? 0 : 7;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

}  // namespace
}  // namespace sbp
