#include "worker/dist/connect.h"

#include "absl/strings/str_cat.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "worker/dist/gloo_communicator.h"

#ifdef SBP_WITH_NCCL
#include "worker/dist/nccl_communicator.h"
#endif

namespace sbp {

absl::StatusOr<std::unique_ptr<Communicator>> ConnectCommunicator(
    gloo::rendezvous::Store& store, Backend& backend, const CollectiveOptions& options) {
  const Device device = backend.device();
  if (device.is_cpu()) {
    GlooOptions gloo;
    gloo.rank = options.rank;
    gloo.world_size = options.world_size;
    gloo.host = options.host;
    gloo.timeout = options.timeout;
    gloo.scratch_allocator = &backend.allocator();
    absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm = GlooCommunicator::Connect(store, gloo);
    if (!comm.ok()) return comm.status();
    return std::unique_ptr<Communicator>(*std::move(comm));
  }
#ifdef SBP_WITH_NCCL
  NcclOptions nccl;
  nccl.rank = options.rank;
  nccl.world_size = options.world_size;
  nccl.device = device.index;
  nccl.compute_stream = backend.native_stream();
  nccl.timeout = options.timeout;
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Connect(store, nccl);
  if (!comm.ok()) return comm.status();
  return std::unique_ptr<Communicator>(*std::move(comm));
#else
  return absl::FailedPreconditionError(
      absl::StrCat(DeviceName(device), ": this build has no NCCL communicator"));
#endif
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectThroughDirectory(
    const std::string& dir, Backend& backend, const CollectiveOptions& options) {
  gloo::rendezvous::FileStore files(dir);
  gloo::rendezvous::PrefixStore store("ranks", files);
  return ConnectCommunicator(store, backend, options);
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectSequenceGroup(gloo::rendezvous::Store& store,
                                                                   Backend& backend,
                                                                   const CollectiveOptions& world,
                                                                   int group_size) {
  if (world.world_size < 1 || world.rank < 0 || world.rank >= world.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", world.rank, " is not in a world of ", world.world_size));
  }
  if (group_size < 1 || world.world_size % group_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence group size ", group_size, " does not divide the world size ", world.world_size));
  }
  const int group = world.rank / group_size;
  gloo::rendezvous::PrefixStore prefixed(absl::StrCat("sequence-group-", group), store);
  CollectiveOptions options = world;
  options.rank = world.rank % group_size;
  options.world_size = group_size;
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      ConnectCommunicator(prefixed, backend, options);
  if (!comm.ok()) {
    return absl::Status(comm.status().code(),
                        absl::StrCat("sequence group ", group, " (world rank ", world.rank,
                                     "): ", comm.status().message()));
  }
  return comm;
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectSequenceGroupThroughDirectory(
    const std::string& dir, Backend& backend, const CollectiveOptions& world, int group_size) {
  gloo::rendezvous::FileStore files(dir);
  gloo::rendezvous::PrefixStore store("ranks", files);
  return ConnectSequenceGroup(store, backend, world, group_size);
}

}  // namespace sbp
