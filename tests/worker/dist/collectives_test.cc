// Gloo collectives between 2, 3 and 4 rank processes on loopback: the
// communicator contract (communicator_contract.h) on host memory, and a dead
// peer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "tests/worker/dist/communicator_contract.h"
#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/train/test_util.h"

namespace sbp {
namespace {

using dist_testing::ConnectThroughDirectory;
using dist_testing::RunRankProcesses;

// Host buffers: Gloo's memory.
class HostMemory final : public dist_testing::ContractMemory {
 public:
  float* Allocate(int64_t n) override {
    buffers_.emplace_back(static_cast<size_t>(n));
    return buffers_.back().data();
  }
  void Upload(const std::vector<float>& values, float* dst) override {
    std::copy(values.begin(), values.end(), dst);
  }
  std::vector<float> Download(const float* src, int64_t n) override {
    return std::vector<float>(src, src + n);
  }

 private:
  std::deque<std::vector<float>> buffers_;
};

int RunCollectives(const std::string& dir, int rank, int n) {
  auto connected = ConnectThroughDirectory(dir, rank, n);
  if (!connected.ok()) {
    std::fprintf(stderr, "rank %d: connect: %s\n", rank, connected.status().ToString().c_str());
    return 1;
  }
  if ((*connected)->rank() != rank || (*connected)->world_size() != n) return 1;
  HostMemory memory;
  return dist_testing::CheckCommunicatorContract(**connected, memory);
}

class CollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesTest, EveryElementOfEveryCollectiveIsExact) {
  const int n = GetParam();
  const std::string dir = train_testing::MakeTempDir("collectives");
  const std::vector<int> codes =
      RunRankProcesses(n, [&](int rank) { return RunCollectives(dir, rank, n); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesTest, ::testing::Values(2, 3, 4));

// A peer that dies mid-collective: the survivor's call fails with an error
// naming the collective instead of hanging.
TEST(CollectivesFailureTest, DeadPeerFailsTheCollective) {
  const std::string dir = train_testing::MakeTempDir("collectives-dead");
  const std::vector<int> codes = RunRankProcesses(2, [&](int rank) -> int {
    auto connected = ConnectThroughDirectory(dir, rank, 2, nullptr, std::chrono::seconds(10));
    if (!connected.ok()) return 2;
    // Both ranks are fully connected before one of them leaves.
    if (!(*connected)->Barrier().ok()) return 6;
    if (rank == 1) _exit(0);  // leaves without taking part
    std::vector<float> data(2000, 1.0f);
    const absl::Status s = (*connected)->ReduceScatterSum(data.data(), 1000, nullptr, nullptr);
    if (s.ok()) return 3;
    std::fprintf(stderr, "survivor: %s\n", s.ToString().c_str());
    if (s.message().find("reduce-scatter") == absl::string_view::npos) return 4;
    // The communicator is unusable afterwards, and says so.
    if ((*connected)->Barrier().code() != absl::StatusCode::kFailedPrecondition) return 5;
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

}  // namespace
}  // namespace sbp
