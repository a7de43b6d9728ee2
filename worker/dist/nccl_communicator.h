// Communicator over NCCL for CUDA workers (built when the CUDA toolkit is
// found). Buffers are device pointers on the rank's device. Rank 0 creates
// the NCCL unique id and publishes it through the rendezvous Store (the
// coordinator's key-value service, scoped to the attempt), the others read
// it. Collectives run on the communicator's own stream: each call first
// makes that stream wait for the work already queued on the compute stream
// (an event), then waits for the collective's completion event, polling
// NCCL's asynchronous error state; past the timeout, or on a peer's error,
// the communicator is aborted and the call returns an error naming it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "gloo/rendezvous/store.h"
#include "worker/dist/communicator.h"

namespace sbp {

struct NcclOptions {
  int rank = 0;
  int world_size = 1;
  int device = 0;                  // CUDA device index of this rank
  void* compute_stream = nullptr;  // cudaStream_t the engine computes on (null: default)
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  // Tests only: every collective, once really enqueued, is treated as an
  // enqueue failure (as NCCL answering an error, or still in progress past
  // the timeout, would be), to reach the failure path on one device.
  bool fail_after_enqueue_for_testing = false;
};

class NcclCommunicator final : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Connect(gloo::rendezvous::Store& store,
                                                                   const NcclOptions& options);
  ~NcclCommunicator() override;

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  absl::Status ReduceScatterSum(float* data, int64_t chunk, float* accumulator,
                                const ComputeMark* after) override;
  absl::Status AllGather(void* data, int64_t chunk_bytes) override;
  // `data` is a host array here (counts and norms); it is staged through a
  // small device buffer.
  absl::Status AllReduce(double* data, int64_t count, ReduceOp op) override;
  // One grouped ncclSend/ncclRecv per rank (this one included).
  absl::Status AllToAll(const void* send, void* recv, int64_t block_bytes) override;
  absl::Status Broadcast(void* data, int64_t bytes, int root) override;
  absl::Status Barrier() override;
  std::shared_ptr<const ComputeMark> MarkCompute() override;

  // Whether a failed collective has made the communicator unusable, and how
  // many times it was aborted on the way (tests: a failure after the enqueue
  // must abort before the caller reuses its buffers).
  bool broken() const;
  int64_t aborts() const;

 private:
  struct Impl;
  explicit NcclCommunicator(const NcclOptions& options);
  // Orders the comm stream after the compute stream when the collective
  // reads device data that compute produces (`after_compute`: after the
  // `after` mark, or after all compute issued so far without one), runs
  // `enqueue` (which queues NCCL work on the given stream and returns an
  // ncclResult_t), then waits for it within the timeout. The timeout counts
  // from when this rank's awaited compute is done, so that a long queued
  // forward pass is not taken for a peer that does not answer.
  absl::Status Launch(const char* what, bool after_compute, const ComputeMark* after,
                      const std::function<int(void* stream)>& enqueue);
  // Aborts the communicator, drains its stream and marks it broken; returns
  // `status`. Every failure once a collective may have been enqueued.
  absl::Status Fail(absl::Status status);

  NcclOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sbp
