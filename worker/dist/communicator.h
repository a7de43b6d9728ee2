// Collectives among the ranks of one training attempt. Every call is
// blocking, made by all ranks in the same order, and returns an error instead
// of hanging: a peer that died or stopped answering surfaces as UNAVAILABLE or
// DEADLINE_EXCEEDED within the communicator's timeout, naming the collective,
// so the worker can fail its attempt and the coordinator can retry it.
//
// Buffers live in host memory for the Gloo implementation and in device
// memory for NCCL. After a failed collective the communicator is unusable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"

namespace sbp {

enum class ReduceOp { kSum, kMax };

// A point in the order of the compute queue (a recorded event on a GPU).
class ComputeMark {
 public:
  virtual ~ComputeMark() = default;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Marks how far the compute queue has been issued, on the thread that
  // issues compute. A collective given the mark waits for the compute issued
  // before it and no more: ZeRO-2 hands layer l's reduce-scatter to its
  // communication thread while layer l-1's backward is still being issued,
  // and must not wait for that. Null where buffers are host memory (Gloo):
  // there the compute that filled a buffer is done when it is handed over.
  virtual std::shared_ptr<const ComputeMark> MarkCompute() { return nullptr; }

  // `data` holds world_size() chunks of `chunk` floats. Afterwards chunk
  // rank() of `data` holds the element-wise sum of every rank's chunk rank();
  // the other chunks are clobbered (they are the ring's working space). With
  // `accumulator` (`chunk` floats in the same memory as `data`) the sum is
  // also added to it, on the communicator's side (its stream on a GPU), so
  // the caller never touches the result: accumulator += sum. With `after`
  // (from MarkCompute) the collective waits for the compute issued before
  // the mark; without it, for all compute issued before this call.
  virtual absl::Status ReduceScatterSum(float* data, int64_t chunk, float* accumulator,
                                        const ComputeMark* after) = 0;

  // `data` holds world_size() chunks of `chunk_bytes` bytes (any element
  // type: f32 master weights, bf16 compute weights); chunk r comes from rank
  // r. Afterwards every rank holds all chunks.
  virtual absl::Status AllGather(void* data, int64_t chunk_bytes) = 0;

  // Element-wise reduction of `count` doubles over all ranks, in place.
  virtual absl::Status AllReduce(double* data, int64_t count, ReduceOp op) = 0;

  // `send` holds world_size() blocks of `block_bytes` bytes, block j for
  // rank j; afterwards block i of `recv` (not overlapping `send`) holds what
  // rank i sent to this rank. Waits for all compute issued before the call
  // and returns once `recv` holds the data (sequence parallelism's exchange
  // between token-split and head-split layouts).
  virtual absl::Status AllToAll(const void* send, void* recv, int64_t block_bytes) = 0;

  // `bytes` bytes of `data` from `root` to every rank.
  virtual absl::Status Broadcast(void* data, int64_t bytes, int root) = 0;

  virtual absl::Status Barrier() = 0;
};

}  // namespace sbp
