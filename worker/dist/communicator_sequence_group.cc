#include "worker/dist/communicator_sequence_group.h"

#include <chrono>

namespace sbp {

absl::Status CommunicatorSequenceGroup::AllToAll(const void* send, void* recv,
                                                 int64_t block_bytes) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = comm_.AllToAll(send, recv, block_bytes);
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++calls_;
  if (status.ok()) bytes_ += block_bytes * (comm_.world_size() - 1);
  return status;
}

absl::Status CommunicatorSequenceGroup::Sum(double* values, int64_t count) {
  return comm_.AllReduce(values, count, ReduceOp::kSum);
}

}  // namespace sbp
