// The ranks that share one sequence under Ulysses sequence parallelism. A
// sequence of T tokens is cut into size() contiguous pieces of T / size()
// rows; the rank at position() holds piece position(). Around attention the
// group exchanges its pieces (all-to-all) so that each rank sees the whole
// sequence for 1 / size() of the heads, and back.
//
// The engine only needs this interface; worker/dist adapts a Communicator
// to it (Gloo on the CPU, NCCL on a GPU).
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace sbp {

class SequenceGroup {
 public:
  virtual ~SequenceGroup() = default;
  virtual int position() const = 0;
  virtual int size() const = 0;
  // `send` holds size() blocks of `block_bytes`, block j for position j;
  // afterwards block i of `recv` holds what position i sent here. Buffers are
  // the backend's memory; the call waits for the compute issued before it and
  // returns once `recv` holds the data.
  virtual absl::Status AllToAll(const void* send, void* recv, int64_t block_bytes) = 0;
  // Element-wise sum over the group, in place (host memory).
  virtual absl::Status Sum(double* values, int64_t count) = 0;
};

}  // namespace sbp
