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

}  // namespace sbp
