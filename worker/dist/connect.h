// The communicator for a rank's device: Gloo over TCP for a CPU backend,
// NCCL on the backend's stream for a CUDA one (CUDA builds). Both find their
// peers through the same rendezvous Store (the coordinator's key-value
// service, scoped to the attempt), so a worker never chooses by hand.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gloo/rendezvous/store.h"
#include "kernels/backend.h"
#include "worker/dist/communicator.h"

namespace sbp {

struct CollectiveOptions {
  int rank = 0;
  int world_size = 1;
  // Gloo: the address this rank listens on, as its peers reach it.
  std::string host = "127.0.0.1";
  // Bound on the rendezvous and on every collective.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

// `store` is only used during the call. The backend's allocator holds the
// communicator's buffers, so they count in the run's peak.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectCommunicator(gloo::rendezvous::Store& store,
                                                                  Backend& backend,
                                                                  const CollectiveOptions& options);

// The same through a rendezvous directory shared by the ranks (Gloo's file
// store) instead of the coordinator: for tests and benchmarks.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectThroughDirectory(
    const std::string& dir, Backend& backend, const CollectiveOptions& options);

// The communicator among the ranks that share one sequence (sequence
// parallelism): world rank r is in group r / group_size at position
// r % group_size; each group rendezvouses under its own prefix of `store`
// ("sequence-group-<g>"), so the groups connect and run independently.
// InvalidArgument when group_size does not divide the world size.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectSequenceGroup(gloo::rendezvous::Store& store,
                                                                   Backend& backend,
                                                                   const CollectiveOptions& world,
                                                                   int group_size);

// The same through a rendezvous directory (tests and benchmarks); the
// world's ConnectThroughDirectory may use the same directory.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectSequenceGroupThroughDirectory(
    const std::string& dir, Backend& backend, const CollectiveOptions& world, int group_size);

}  // namespace sbp
