// NCCL collectives on real GPUs: one rank per device as separate processes
// (all visible devices, at least one), rendezvous through a directory store;
// each rank checks the communicator contract (communicator_contract.h) on
// device memory, as the Gloo test does on host memory. Skipped without a
// CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

}  // namespace
}  // namespace sbp
