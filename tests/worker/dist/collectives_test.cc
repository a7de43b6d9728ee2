// Gloo collectives between 2, 3 and 4 rank processes on loopback. The data
// are small integers, so every sum is exact in fp32 and each rank can check
// every element against the closed form.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/train/test_util.h"

namespace sbp {
namespace {

using dist_testing::ConnectThroughDirectory;
using dist_testing::RunRankProcesses;

// Element i of rank r's input.
float Value(int r, int64_t i) { return static_cast<float>((r + 1) * 1000 + i % 977); }

#define RANK_CHECK(cond, ...)                  \
  do {                                         \
    if (!(cond)) {                             \
      std::fprintf(stderr, "rank %d: ", rank); \
      std::fprintf(stderr, __VA_ARGS__);       \
      std::fprintf(stderr, "\n");              \
      return 1;                                \
    }                                          \
  } while (0)

int RunCollectives(const std::string& dir, int rank, int n) {
  auto connected = ConnectThroughDirectory(dir, rank, n);
  RANK_CHECK(connected.ok(), "connect: %s", connected.status().ToString().c_str());
  Communicator& comm = **connected;
  RANK_CHECK(comm.rank() == rank && comm.world_size() == n, "wrong rank/size");

  // Reduce-scatter over several sizes, including a chunk of one element.
  for (int64_t chunk : {1, 7, 4096, 100003}) {
    std::vector<float> data(static_cast<size_t>(chunk * n));
    for (int64_t i = 0; i < chunk * n; ++i) data[i] = Value(rank, i);
    const absl::Status s = comm.ReduceScatterSum(data.data(), chunk);
    RANK_CHECK(s.ok(), "reduce-scatter: %s", s.ToString().c_str());
    for (int64_t i = 0; i < chunk; ++i) {
      const int64_t global = rank * chunk + i;
      float expected = 0;
      for (int r = 0; r < n; ++r) expected += Value(r, global);
      RANK_CHECK(data[global] == expected, "reduce-scatter chunk %lld element %lld: %f != %f",
                 static_cast<long long>(chunk), static_cast<long long>(i), data[global], expected);
    }
  }
  // All-gather in place.
  for (int64_t chunk : {1, 5, 65537}) {
    std::vector<float> data(static_cast<size_t>(chunk * n), -1.0f);
    for (int64_t i = 0; i < chunk; ++i) data[rank * chunk + i] = Value(rank, i);
    const absl::Status s = comm.AllGather(data.data(), chunk);
    RANK_CHECK(s.ok(), "all-gather: %s", s.ToString().c_str());
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < chunk; ++i) {
        RANK_CHECK(data[r * chunk + i] == Value(r, i), "all-gather chunk %d element %lld", r,
                   static_cast<long long>(i));
      }
    }
  }
  // All-reduce sum and max.
  std::vector<double> sums = {1.0 * rank, 2.5, 1e12 + rank};
  RANK_CHECK(comm.AllReduce(sums.data(), 3, ReduceOp::kSum).ok(), "all-reduce sum");
  const double ranks = n * (n - 1) / 2.0;
  RANK_CHECK(sums[0] == ranks && sums[1] == 2.5 * n && sums[2] == 1e12 * n + ranks,
             "all-reduce sum values %f %f %f", sums[0], sums[1], sums[2]);
  double most = 10.0 * rank;
  RANK_CHECK(comm.AllReduce(&most, 1, ReduceOp::kMax).ok() && most == 10.0 * (n - 1),
             "all-reduce max %f", most);
  // Broadcast from the last rank.
  std::vector<char> bytes(1000, static_cast<char>(rank));
  RANK_CHECK(comm.Broadcast(bytes.data(), 1000, n - 1).ok(), "broadcast");
  for (char c : bytes) RANK_CHECK(c == static_cast<char>(n - 1), "broadcast value %d", c);
  RANK_CHECK(comm.Broadcast(bytes.data(), 1, n).code() == absl::StatusCode::kInvalidArgument,
             "broadcast from a rank that does not exist must be refused");
  RANK_CHECK(comm.Barrier().ok(), "barrier");
  return 0;
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
    const absl::Status s = (*connected)->ReduceScatterSum(data.data(), 1000);
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
