// The device-independent contract of a Communicator, checked the same way
// for Gloo (host buffers) and NCCL (device buffers): every rank runs
// CheckCommunicatorContract with its own communicator and a ContractMemory
// that moves floats between the test and the communicator's memory. Data
// are small integers, so every sum is exact in fp32 and each rank checks
// every element against the closed form. Returns 0, or a non-zero code after
// printing what failed (the rank processes' exit status).
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include "absl/status/status.h"
#include "worker/dist/communicator.h"

namespace sbp::dist_testing {

// Buffers in the communicator's memory (host or device).
class ContractMemory {
 public:
  virtual ~ContractMemory() = default;
  // `n` floats, owned by the memory object until it is destroyed.
  virtual float* Allocate(int64_t n) = 0;
  virtual void Upload(const std::vector<float>& values, float* dst) = 0;
  virtual std::vector<float> Download(const float* src, int64_t n) = 0;
};

// Element i of rank r's input.
inline float ContractValue(int r, int64_t i) {
  return static_cast<float>((r + 1) * 1000 + i % 977);
}

#define CONTRACT_CHECK(cond, ...)              \
  do {                                         \
    if (!(cond)) {                             \
      std::fprintf(stderr, "rank %d: ", rank); \
      std::fprintf(stderr, __VA_ARGS__);       \
      std::fprintf(stderr, "\n");              \
      return 1;                                \
    }                                          \
  } while (0)

inline int CheckCommunicatorContract(Communicator& comm, ContractMemory& memory) {
  const int rank = comm.rank(), n = comm.world_size();
  // Reduce-scatter over several sizes, including a chunk of one element; the
  // accumulator receives the same sum on top of its 0.5 starting values.
  for (int64_t chunk : {1, 7, 4096, 100003}) {
    std::vector<float> values(static_cast<size_t>(chunk * n));
    for (int64_t i = 0; i < chunk * n; ++i) values[i] = ContractValue(rank, i);
    float* data = memory.Allocate(chunk * n);
    float* accumulator = memory.Allocate(chunk);
    for (bool accumulate : {false, true}) {
      memory.Upload(values, data);
      memory.Upload(std::vector<float>(static_cast<size_t>(chunk), 0.5f), accumulator);
      const absl::Status s = comm.ReduceScatterSum(data, chunk, accumulate ? accumulator : nullptr,
                                                   /*after=*/nullptr);
      CONTRACT_CHECK(s.ok(), "reduce-scatter: %s", s.ToString().c_str());
      const std::vector<float> got = memory.Download(data + rank * chunk, chunk);
      const std::vector<float> acc = memory.Download(accumulator, chunk);
      for (int64_t i = 0; i < chunk; ++i) {
        float expected = 0;
        for (int r = 0; r < n; ++r) expected += ContractValue(r, rank * chunk + i);
        CONTRACT_CHECK(got[i] == expected, "reduce-scatter chunk %lld element %lld: %f != %f",
                       static_cast<long long>(chunk), static_cast<long long>(i), got[i], expected);
        const float want_acc = accumulate ? expected + 0.5f : 0.5f;
        CONTRACT_CHECK(acc[i] == want_acc, "accumulator chunk %lld element %lld: %f != %f",
                       static_cast<long long>(chunk), static_cast<long long>(i), acc[i], want_acc);
      }
    }
  }
  // All-gather in place, in bytes: whole floats, and half-float chunks (the
  // bf16 weights' case: chunk 2 * m + 1 halves is not a whole float).
  for (int64_t chunk_bytes : {4, 20, 262148, 6, 131074}) {
    const int64_t floats = (chunk_bytes * n + 3) / 4;
    std::vector<float> values(static_cast<size_t>(floats), -1.0f);
    auto* bytes = reinterpret_cast<unsigned char*>(values.data());
    for (int64_t i = 0; i < chunk_bytes; ++i) bytes[rank * chunk_bytes + i] = (rank * 7 + i) % 251;
    float* data = memory.Allocate(floats);
    memory.Upload(values, data);
    const absl::Status s = comm.AllGather(data, chunk_bytes);
    CONTRACT_CHECK(s.ok(), "all-gather: %s", s.ToString().c_str());
    std::vector<float> got = memory.Download(data, floats);
    const auto* out = reinterpret_cast<const unsigned char*>(got.data());
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < chunk_bytes; ++i) {
        CONTRACT_CHECK(out[r * chunk_bytes + i] == (r * 7 + i) % 251,
                       "all-gather of %lld bytes: chunk %d byte %lld",
                       static_cast<long long>(chunk_bytes), r, static_cast<long long>(i));
      }
    }
  }
  // All-reduce sum and max (host doubles on every implementation).
  std::vector<double> sums = {1.0 * rank, 2.5, 1e12 + rank};
  CONTRACT_CHECK(comm.AllReduce(sums.data(), 3, ReduceOp::kSum).ok(), "all-reduce sum");
  const double ranks = n * (n - 1) / 2.0;
  CONTRACT_CHECK(sums[0] == ranks && sums[1] == 2.5 * n && sums[2] == 1e12 * n + ranks,
                 "all-reduce sum values %f %f %f", sums[0], sums[1], sums[2]);
  double most = 10.0 * rank;
  CONTRACT_CHECK(comm.AllReduce(&most, 1, ReduceOp::kMax).ok() && most == 10.0 * (n - 1),
                 "all-reduce max %f", most);
  // Broadcast from the last rank, in the communicator's memory.
  float* cast = memory.Allocate(250);
  memory.Upload(std::vector<float>(250, static_cast<float>(rank)), cast);
  CONTRACT_CHECK(comm.Broadcast(cast, 1000, n - 1).ok(), "broadcast");
  for (float v : memory.Download(cast, 250)) {
    CONTRACT_CHECK(v == static_cast<float>(n - 1), "broadcast value %f", v);
  }
  CONTRACT_CHECK(comm.Broadcast(cast, 4, n).code() == absl::StatusCode::kInvalidArgument,
                 "broadcast from a rank that does not exist must be refused");
  CONTRACT_CHECK(comm.Barrier().ok(), "barrier");
  return 0;
}

#undef CONTRACT_CHECK

}  // namespace sbp::dist_testing
