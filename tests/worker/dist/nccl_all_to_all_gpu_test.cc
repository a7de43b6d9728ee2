// NCCL all-to-all on real GPUs: one rank per visible device as separate
// processes (NCCL refuses two ranks of one communicator on the same device,
// "Duplicate GPU detected", so one GPU is one rank whose blocks go through
// ncclSend/ncclRecv to itself). Every byte of every block is checked for odd
// sizes; the send buffer is written on the compute stream right before the
// call, so the data also prove that the all-to-all waits for that compute.
// Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/train/test_util.h"
#include "worker/dist/nccl_communicator.h"

namespace sbp {
namespace {

unsigned char Pattern(int src, int dst, int64_t i, int round) {
  return static_cast<unsigned char>((src * 131 + dst * 31 + i * 7 + round * 13) % 251);
}

#define RANK_CHECK(cond, ...)                  \
  do {                                         \
    if (!(cond)) {                             \
      std::fprintf(stderr, "rank %d: ", rank); \
      std::fprintf(stderr, __VA_ARGS__);       \
      std::fprintf(stderr, "\n");              \
      return 1;                                \
    }                                          \
  } while (0)

#define CUDA_CHECK(call) RANK_CHECK((call) == cudaSuccess, "%s failed", #call)

int RankBody(const std::string& dir, int rank, int n) {
  RANK_CHECK(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice");
  cudaStream_t compute = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  gloo::rendezvous::FileStore files(dir);
  gloo::rendezvous::PrefixStore store("nccl", files);
  NcclOptions options;
  options.rank = rank;
  options.world_size = n;
  options.device = rank;
  options.compute_stream = compute;
  options.timeout = std::chrono::seconds(60);
  auto comm = NcclCommunicator::Connect(store, options);
  RANK_CHECK(comm.ok(), "connect: %s", comm.status().ToString().c_str());
  constexpr int64_t kGuard = 64;
  int round = 0;
  for (int64_t block : {int64_t{1}, int64_t{7}, int64_t{4096 + 3}, int64_t{0},
                        int64_t{(1 << 20) + 1}, int64_t{2}}) {
    ++round;
    const int64_t total = n * block;
    std::vector<unsigned char> host(static_cast<size_t>(total));
    for (int j = 0; j < n; ++j) {
      for (int64_t i = 0; i < block; ++i) host[j * block + i] = Pattern(rank, j, i, round);
    }
    char *staging = nullptr, *send = nullptr, *recv = nullptr;
    CUDA_CHECK(cudaMalloc(&staging, total + 1));
    CUDA_CHECK(cudaMalloc(&send, total + 1));
    CUDA_CHECK(cudaMalloc(&recv, total + kGuard));
    CUDA_CHECK(cudaMemcpy(staging, host.data(), total, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(send, 0, total + 1));
    CUDA_CHECK(cudaMemset(recv, 0xEE, total + kGuard));
    CUDA_CHECK(cudaDeviceSynchronize());
    // The send buffer's contents come from the compute stream, not yet done.
    CUDA_CHECK(cudaMemcpyAsync(send, staging, total, cudaMemcpyDeviceToDevice, compute));
    const absl::Status s = (*comm)->AllToAll(send, recv, block);
    RANK_CHECK(s.ok(), "all-to-all of %lld bytes: %s", static_cast<long long>(block),
               s.ToString().c_str());
    std::vector<unsigned char> got(static_cast<size_t>(total + kGuard));
    CUDA_CHECK(cudaMemcpy(got.data(), recv, got.size(), cudaMemcpyDeviceToHost));
    for (int j = 0; j < n; ++j) {
      for (int64_t i = 0; i < block; ++i) {
        RANK_CHECK(got[j * block + i] == Pattern(j, rank, i, round),
                   "all-to-all of %lld bytes: block %d byte %lld is %d",
                   static_cast<long long>(block), j, static_cast<long long>(i), got[j * block + i]);
      }
    }
    for (int64_t i = total; i < total + kGuard; ++i) {
      RANK_CHECK(got[i] == 0xEE, "all-to-all of %lld bytes wrote past its blocks",
                 static_cast<long long>(block));
    }
    cudaFree(staging);
    cudaFree(send);
    cudaFree(recv);
  }
  RANK_CHECK((*comm)->Barrier().ok(), "barrier after the all-to-alls");
  comm->reset();
  cudaStreamDestroy(compute);
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

TEST(NcclAllToAllGpuTest, EveryByteArrivesAcrossAllDevices) {
  const int devices = CountDevicesInChild();
  if (devices == 0) GTEST_SKIP() << "no CUDA device";
  const std::string dir = train_testing::MakeTempDir("nccl-all-to-all");
  const std::vector<int> codes = dist_testing::RunRankProcesses(
      devices, [&](int rank) { return RankBody(dir, rank, devices); });
  for (int r = 0; r < devices; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// A failure once enqueued (injected) goes through the abort path and names
// the all-to-all.
TEST(NcclAllToAllGpuTest, FailureAfterEnqueueAbortsAndNamesIt) {
  if (CountDevicesInChild() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string dir = train_testing::MakeTempDir("nccl-all-to-all-failure");
  const std::vector<int> codes = dist_testing::RunRankProcesses(1, [&](int rank) -> int {
    gloo::rendezvous::FileStore files(dir);
    gloo::rendezvous::PrefixStore store("nccl", files);
    NcclOptions options;
    options.timeout = std::chrono::seconds(10);
    options.fail_after_enqueue_for_testing = true;
    auto comm = NcclCommunicator::Connect(store, options);
    RANK_CHECK(comm.ok(), "connect: %s", comm.status().ToString().c_str());
    char *send = nullptr, *recv = nullptr;
    CUDA_CHECK(cudaMalloc(&send, 1 << 20));
    CUDA_CHECK(cudaMalloc(&recv, 1 << 20));
    const absl::Status s = (*comm)->AllToAll(send, recv, 1 << 20);
    RANK_CHECK(!s.ok() && s.message().find("all-to-all") != absl::string_view::npos,
               "expected an error naming the all-to-all: %s", s.ToString().c_str());
    RANK_CHECK((*comm)->aborts() == 1 && (*comm)->broken(), "not aborted");
    RANK_CHECK(
        (*comm)->AllToAll(send, recv, 1 << 20).code() == absl::StatusCode::kFailedPrecondition,
        "usable after a failure");
    CUDA_CHECK(cudaFree(send));
    CUDA_CHECK(cudaFree(recv));
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
}

#undef CUDA_CHECK
#undef RANK_CHECK

}  // namespace
}  // namespace sbp
