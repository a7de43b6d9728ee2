// NCCL collectives on real GPUs: one rank per device as separate processes
// (all visible devices, at least one), rendezvous through a directory store,
// small-integer data so sums are exact; each rank checks every element.
// Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/train/test_util.h"
#include "worker/dist/nccl_communicator.h"

namespace sbp {
namespace {

float Value(int r, int64_t i) { return static_cast<float>((r + 1) * 100 + i % 251); }

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
  const int64_t chunk = 4099;
  std::vector<float> host(chunk * n);
  for (int64_t i = 0; i < chunk * n; ++i) host[i] = Value(rank, i);
  float* device = nullptr;
  if (cudaMalloc(&device, host.size() * sizeof(float)) != cudaSuccess) return 2;
  cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  if (!(*comm)->ReduceScatterSum(device, chunk).ok()) return 3;
  cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost);
  for (int64_t i = 0; i < chunk; ++i) {
    float expected = 0;
    for (int r = 0; r < n; ++r) expected += Value(r, rank * chunk + i);
    if (host[rank * chunk + i] != expected) return 4;
  }
  // All-gather: chunk r = Value(r, i).
  for (int64_t i = 0; i < chunk; ++i) host[rank * chunk + i] = Value(rank, i);
  cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  if (!(*comm)->AllGather(device, chunk).ok()) return 5;
  cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost);
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < chunk; ++i) {
      if (host[r * chunk + i] != Value(r, i)) return 6;
    }
  }
  double sums[2] = {1.0 * rank, 3.0};
  if (!(*comm)->AllReduce(sums, 2, ReduceOp::kSum).ok()) return 7;
  if (sums[0] != n * (n - 1) / 2.0 || sums[1] != 3.0 * n) return 8;
  double most = rank;
  if (!(*comm)->AllReduce(&most, 1, ReduceOp::kMax).ok() || most != n - 1) return 9;
  if (!(*comm)->Barrier().ok()) return 10;
  cudaFree(device);
  return 0;
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
