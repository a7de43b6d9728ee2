// Communicator over Gloo's TCP transport for CPU workers. The ranks find each
// other through a rendezvous Store (the coordinator's RendezvousService in
// production, a directory for tests); each publishes the address it listens
// on for its peers.
//
// Reduce-scatter and the in-place all-gather are rings over Gloo's unbound
// buffers (Gloo has no function-style reduce-scatter), and so is the
// all-to-all (one send and one receive per peer, all waits within one
// `timeout` together); all-reduce, broadcast and barrier are Gloo's own.
// Every wait is bounded by `timeout`.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gloo/rendezvous/store.h"
#include "kernels/allocator.h"
#include "worker/dist/communicator.h"

namespace gloo {
class Context;
}

namespace sbp {

struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  // The host name or address this rank listens on, as its peers reach it.
  std::string host = "127.0.0.1";
  // Bound on the rendezvous and on every collective.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  // Where the reduce-scatter's receive buffer (one chunk) is allocated, so
  // that it counts in the worker's peak; null: an untracked host buffer.
  Allocator* scratch_allocator = nullptr;
};

class GlooCommunicator final : public Communicator {
 public:
  // Connects the full mesh; `store` is only used during the call.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Connect(gloo::rendezvous::Store& store,
                                                                   const GlooOptions& options);
  ~GlooCommunicator() override;

  int rank() const override;
  int world_size() const override;
  absl::Status ReduceScatterSum(float* data, int64_t chunk, float* accumulator,
                                const ComputeMark* after) override;
  absl::Status AllGather(void* data, int64_t chunk_bytes) override;
  absl::Status AllReduce(double* data, int64_t count, ReduceOp op) override;
  absl::Status AllToAll(const void* send, void* recv, int64_t block_bytes) override;
  absl::Status Broadcast(void* data, int64_t bytes, int root) override;
  absl::Status Barrier() override;

 private:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, const GlooOptions& options);
  // The ring reduce-scatter proper (no accumulator).
  absl::Status RingReduceScatter(float* data, int64_t chunk);
  // Runs `body`, turning Gloo's exceptions into a status naming `what`.
  template <typename Body>
  absl::Status Guard(const char* what, Body&& body);

  std::shared_ptr<gloo::Context> context_;
  std::chrono::milliseconds timeout_;
  Allocator* scratch_allocator_;
  bool broken_ = false;
};

// Connects through a rendezvous directory shared by the ranks (Gloo's file
// store) instead of the coordinator: for tests and benchmarks.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectThroughDirectory(const std::string& dir,
                                                                      const GlooOptions& options);

}  // namespace sbp
