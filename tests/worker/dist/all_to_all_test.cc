// The all-to-all of sequence parallelism on Gloo, between 1 to 4 rank
// processes on loopback: every byte of every block for odd and empty block
// sizes, back to back with the other collectives, in sequence groups
// (ConnectSequenceGroup), and against a peer that dies or stays silent.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gloo/rendezvous/hash_store.h"
#include "kernels/allocator.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/train/test_util.h"
#include "worker/dist/connect.h"

namespace sbp {
namespace {

using dist_testing::RunRankProcesses;
using Clock = std::chrono::steady_clock;

// Byte i of the block rank `src` sends to rank `dst` in round `round`:
// different for every (src, dst) pair and along the block.
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

// One all-to-all of `block` bytes per rank; `rank` is the sender's name in
// the pattern (the world rank in a sequence group, whose members are
// `members[0..n)`). Checks every received byte, that the send buffer is
// untouched and that nothing past the n blocks of `recv` is written.
int CheckAllToAll(Communicator& comm, int64_t block, int round, int rank,
                  const std::vector<int>& members) {
  const int n = comm.world_size(), me = comm.rank();
  constexpr int64_t kGuard = 64;
  std::vector<unsigned char> send(static_cast<size_t>(n * block));
  for (int j = 0; j < n; ++j) {
    for (int64_t i = 0; i < block; ++i) send[j * block + i] = Pattern(rank, members[j], i, round);
  }
  const std::vector<unsigned char> sent = send;
  std::vector<unsigned char> recv(static_cast<size_t>(n * block + kGuard), 0xEE);
  const absl::Status s = comm.AllToAll(send.data(), recv.data(), block);
  RANK_CHECK(s.ok(), "all-to-all of %lld bytes: %s", static_cast<long long>(block),
             s.ToString().c_str());
  RANK_CHECK(send == sent, "all-to-all of %lld bytes changed the send buffer",
             static_cast<long long>(block));
  for (int j = 0; j < n; ++j) {
    for (int64_t i = 0; i < block; ++i) {
      const unsigned char want = Pattern(members[j], members[me], i, round);
      RANK_CHECK(recv[j * block + i] == want,
                 "all-to-all of %lld bytes, round %d: block %d byte %lld is %d, expected %d",
                 static_cast<long long>(block), round, j, static_cast<long long>(i),
                 recv[j * block + i], want);
    }
  }
  for (int64_t i = n * block; i < n * block + kGuard; ++i) {
    RANK_CHECK(recv[i] == 0xEE, "all-to-all of %lld bytes wrote past its blocks (byte %lld)",
               static_cast<long long>(block), static_cast<long long>(i));
  }
  return 0;
}

std::vector<int> Iota(int n, int first = 0) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

class AllToAllTest : public ::testing::TestWithParam<int> {};

TEST_P(AllToAllTest, EveryByteOfEveryBlockArrives) {
  const int n = GetParam();
  const std::string dir = train_testing::MakeTempDir("all-to-all");
  const std::vector<int> codes = RunRankProcesses(n, [&](int rank) -> int {
    auto comm = dist_testing::ConnectThroughDirectory(dir, rank, n);
    RANK_CHECK(comm.ok(), "connect: %s", comm.status().ToString().c_str());
    RANK_CHECK((*comm)->rank() == rank && (*comm)->world_size() == n, "rank or world size");
    int round = 0;
    for (int64_t block : {1, 7, 4096 + 3, 0, 64 * 1024 + 1, 2}) {
      if (CheckAllToAll(**comm, block, round++, rank, Iota(n)) != 0) return 1;
    }
    // Zero bytes is a no-op: null buffers are fine.
    RANK_CHECK((*comm)->AllToAll(nullptr, nullptr, 0).ok(), "all-to-all of 0 bytes");
    RANK_CHECK((*comm)->Barrier().ok(), "barrier after the all-to-alls");
    return 0;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllToAllTest, ::testing::Values(1, 2, 3, 4));

// Many all-to-alls back to back, between reduce-scatters, all-reduces and
// all-gathers issued in the same order on every rank: each result exact.
class AllToAllInterleavedTest : public ::testing::TestWithParam<int> {};

TEST_P(AllToAllInterleavedTest, MixedWithTheOtherCollectives) {
  const int n = GetParam();
  const std::string dir = train_testing::MakeTempDir("all-to-all-mixed");
  const std::vector<int> codes = RunRankProcesses(n, [&](int rank) -> int {
    auto comm = dist_testing::ConnectThroughDirectory(dir, rank, n);
    RANK_CHECK(comm.ok(), "connect: %s", comm.status().ToString().c_str());
    Communicator& c = **comm;
    for (int round = 0; round < 40; ++round) {
      if (CheckAllToAll(c, 1 + (round * 37) % 301, round, rank, Iota(n)) != 0) return 1;
      // Reduce-scatter of small integers: exact sums.
      const int64_t chunk = 1 + round % 5;
      std::vector<float> data(static_cast<size_t>(chunk * n));
      for (int64_t i = 0; i < chunk * n; ++i) data[i] = static_cast<float>(rank * 10 + i + round);
      RANK_CHECK(c.ReduceScatterSum(data.data(), chunk, nullptr, nullptr).ok(), "reduce-scatter");
      for (int64_t i = 0; i < chunk; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += static_cast<float>(r * 10 + rank * chunk + i + round);
        RANK_CHECK(data[rank * chunk + i] == want, "reduce-scatter round %d element %lld", round,
                   static_cast<long long>(i));
      }
      if (CheckAllToAll(c, 4096 + round, round + 1000, rank, Iota(n)) != 0) return 1;
      double value = rank + round;
      RANK_CHECK(c.AllReduce(&value, 1, ReduceOp::kSum).ok(), "all-reduce");
      RANK_CHECK(value == n * (n - 1) / 2.0 + n * round, "all-reduce round %d: %f", round, value);
      if (round % 4 == 0) {
        std::vector<unsigned char> gathered(static_cast<size_t>(3 * n), 0);
        for (int i = 0; i < 3; ++i) gathered[rank * 3 + i] = Pattern(rank, 0, i, round);
        RANK_CHECK(c.AllGather(gathered.data(), 3).ok(), "all-gather");
        for (int r = 0; r < n; ++r) {
          for (int i = 0; i < 3; ++i) {
            RANK_CHECK(gathered[r * 3 + i] == Pattern(r, 0, i, round), "all-gather round %d",
                       round);
          }
        }
      }
    }
    return 0;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllToAllInterleavedTest, ::testing::Values(2, 3));

// World 4 in two sequence groups of 2 ({0, 1} and {2, 3}), rendezvous in the
// same directory as the world's communicator: each group runs its own
// number of all-to-alls (group 0 starting late) and sees only its members'
// data; the world communicator still works afterwards.
TEST(SequenceGroupTest, GroupsExchangeIndependently) {
  constexpr int kWorld = 4, kGroup = 2;
  const std::string dir = train_testing::MakeTempDir("sequence-groups");
  const std::vector<int> codes = RunRankProcesses(kWorld, [&](int rank) -> int {
    CpuAllocator allocator;
    CpuBackend backend(allocator);
    CollectiveOptions world;
    world.rank = rank;
    world.world_size = kWorld;
    world.timeout = std::chrono::seconds(30);
    auto whole = ConnectThroughDirectory(dir, backend, world);
    RANK_CHECK(whole.ok(), "world: %s", whole.status().ToString().c_str());
    auto group = ConnectSequenceGroupThroughDirectory(dir, backend, world, kGroup);
    RANK_CHECK(group.ok(), "sequence group: %s", group.status().ToString().c_str());
    RANK_CHECK((*group)->rank() == rank % kGroup && (*group)->world_size() == kGroup,
               "group rank %d of %d", (*group)->rank(), (*group)->world_size());
    const int g = rank / kGroup;
    const std::vector<int> members = Iota(kGroup, g * kGroup);
    if (g == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const int rounds = g == 0 ? 3 : 7;
    for (int round = 0; round < rounds; ++round) {
      if (CheckAllToAll(**group, 1 + 97 * round, round, rank, members) != 0) return 1;
    }
    // Each group's sum of its world ranks, then the world's.
    double in_group = rank;
    RANK_CHECK((*group)->AllReduce(&in_group, 1, ReduceOp::kSum).ok(), "group all-reduce");
    RANK_CHECK(in_group == members[0] + members[1], "group all-reduce %f", in_group);
    double rounds_done = rounds;
    RANK_CHECK((*whole)->AllReduce(&rounds_done, 1, ReduceOp::kSum).ok(), "world all-reduce");
    RANK_CHECK(rounds_done == 2 * 3 + 2 * 7, "world all-reduce %f", rounds_done);
    return 0;
  });
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(SequenceGroupTest, GroupSizeMustDivideTheWorld) {
  CpuAllocator allocator;
  CpuBackend backend(allocator);
  gloo::rendezvous::HashStore store;
  CollectiveOptions world;
  world.rank = 1;
  world.world_size = 4;
  world.timeout = std::chrono::seconds(2);
  for (int group_size : {3, 0, -2, 8}) {
    auto group = ConnectSequenceGroup(store, backend, world, group_size);
    ASSERT_FALSE(group.ok()) << group_size;
    EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument) << group.status();
    EXPECT_NE(group.status().message().find("sequence group size"), absl::string_view::npos)
        << group.status();
  }
  // A group of one rank needs no peer: its all-to-all is a copy.
  auto single = ConnectSequenceGroup(store, backend, world, 1);
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ((*single)->rank(), 0);
  EXPECT_EQ((*single)->world_size(), 1);
  const std::vector<unsigned char> send = {1, 2, 3, 4, 5};
  std::vector<unsigned char> recv(5, 0);
  ASSERT_TRUE((*single)->AllToAll(send.data(), recv.data(), 5).ok());
  EXPECT_EQ(recv, send);
}

// A peer that is gone: it exits before the call, or is killed while the
// others wait in it. Each survivor's all-to-all fails, naming it, within the
// timeout (2 s, plus slack for a loaded machine), and the communicator says
// it is unusable afterwards.
enum class Departure { kExitsBefore, kKilledDuring, kSilent };

class AllToAllFailureTest : public ::testing::TestWithParam<Departure> {};

TEST_P(AllToAllFailureTest, SurvivorsFailWithinTheTimeout) {
  const Departure how = GetParam();
  constexpr int kWorld = 3, kGone = 2;
  constexpr auto kTimeout = std::chrono::seconds(2);
  const std::string dir = train_testing::MakeTempDir("all-to-all-failure");
  const std::vector<int> codes = RunRankProcesses(kWorld, [&](int rank) -> int {
    auto comm = dist_testing::ConnectThroughDirectory(dir, rank, kWorld, nullptr, kTimeout);
    RANK_CHECK(comm.ok(), "connect: %s", comm.status().ToString().c_str());
    // Everyone is connected before one of them leaves.
    RANK_CHECK((*comm)->Barrier().ok(), "barrier");
    if (rank == kGone) {
      switch (how) {
        case Departure::kExitsBefore:
          _exit(0);
        case Departure::kKilledDuring:
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          raise(SIGKILL);
          break;
        case Departure::kSilent:  // present, but never calls
          std::this_thread::sleep_for(std::chrono::seconds(6));
          _exit(0);
      }
      return 9;
    }
    const int64_t block = 4096;
    std::vector<char> send(kWorld * block, 1), recv(kWorld * block, 0);
    const auto start = Clock::now();
    const absl::Status s = (*comm)->AllToAll(send.data(), recv.data(), block);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::fprintf(stderr, "rank %d after %.2f s: %s\n", rank, seconds, s.ToString().c_str());
    RANK_CHECK(!s.ok(), "the all-to-all succeeded without rank %d", kGone);
    RANK_CHECK(s.message().find("all-to-all") != absl::string_view::npos,
               "the error does not name the all-to-all");
    RANK_CHECK(s.code() == absl::StatusCode::kUnavailable ||
                   s.code() == absl::StatusCode::kDeadlineExceeded,
               "code %s", absl::StatusCodeToString(s.code()).c_str());
    if (how == Departure::kSilent) {
      RANK_CHECK(s.code() == absl::StatusCode::kDeadlineExceeded, "a silent peer is a timeout");
    }
    RANK_CHECK(seconds < 2.0 + 3.0, "took %.2f s with a 2 s timeout", seconds);
    RANK_CHECK((*comm)->AllToAll(send.data(), recv.data(), block).code() ==
                   absl::StatusCode::kFailedPrecondition,
               "the communicator must be unusable after a failed all-to-all");
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(codes[kGone], how == Departure::kKilledDuring ? -SIGKILL : 0);
}

INSTANTIATE_TEST_SUITE_P(Departures, AllToAllFailureTest,
                         ::testing::Values(Departure::kExitsBefore, Departure::kKilledDuring,
                                           Departure::kSilent),
                         [](const ::testing::TestParamInfo<Departure>& info) -> std::string {
                           switch (info.param) {
                             case Departure::kExitsBefore:
                               return "ExitsBefore";
                             case Departure::kKilledDuring:
                               return "KilledDuring";
                             case Departure::kSilent:
                               return "Silent";
                           }
                           return "Unknown";
                         });

#undef RANK_CHECK

}  // namespace
}  // namespace sbp
