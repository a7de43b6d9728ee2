#include "worker/dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/launch.h"

namespace sbp {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kUniqueIdKey[] = "nccl_unique_id";

absl::Status CudaStatus(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return absl::OkStatus();
  // The status carries the error; left as the thread's last error it would
  // fail the next kernel launch's check instead.
  (void)cudaGetLastError();
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorString(e)));
}

std::string NcclText(ncclResult_t r) { return ncclGetErrorString(r); }

// A non-blocking communicator may answer ncclInProgress: the call (a
// collective being enqueued, finalisation, initialisation) goes on in the
// background. Polls ncclCommGetAsyncError until it is no longer in progress,
// or `deadline` passes (then ncclInProgress is returned).
ncclResult_t WaitWhileInProgress(ncclComm_t comm, Clock::time_point deadline) {
  ncclResult_t state = ncclInProgress;
  while (true) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state != ncclInProgress || Clock::now() > deadline) return state;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr, done = nullptr;
  double* staging = nullptr;  // device buffer for host all-reduces
  int64_t staging_count = 0;
  bool broken = false;
  int64_t aborts = 0;  // times Fail aborted the communicator (tests read it)
};

NcclCommunicator::NcclCommunicator(const NcclOptions& options)
    : options_(options), impl_(std::make_unique<Impl>()) {}

NcclCommunicator::~NcclCommunicator() {
  if (impl_ == nullptr) return;
  cudaSetDevice(options_.device);
  if (impl_->comm != nullptr) {
    bool finalized = false;
    if (!impl_->broken) {
      // Finalisation flushes outstanding work; on a non-blocking communicator
      // it may still be in progress when the call returns, and destroying
      // the communicator before it completes is undefined.
      const ncclResult_t r = ncclCommFinalize(impl_->comm);
      finalized = (r == ncclSuccess || r == ncclInProgress) &&
                  WaitWhileInProgress(impl_->comm, Clock::now() + options_.timeout) == ncclSuccess;
    }
    if (finalized) {
      ncclCommDestroy(impl_->comm);
    } else {
      ncclCommAbort(impl_->comm);
    }
  }
  if (impl_->staging != nullptr) cudaFree(impl_->staging);
  if (impl_->ready != nullptr) cudaEventDestroy(impl_->ready);
  if (impl_->done != nullptr) cudaEventDestroy(impl_->done);
  if (impl_->stream != nullptr) cudaStreamDestroy(impl_->stream);
}

bool NcclCommunicator::broken() const { return impl_->broken; }
int64_t NcclCommunicator::aborts() const { return impl_->aborts; }

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Connect(
    gloo::rendezvous::Store& store, const NcclOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is not in a world of ", options.world_size));
  }
  std::unique_ptr<NcclCommunicator> self(new NcclCommunicator(options));
  Impl& impl = *self->impl_;
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options.device), "cudaSetDevice"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&impl.stream, cudaStreamNonBlocking),
                             "cudaStreamCreate"));
  RETURN_IF_ERROR(
      CudaStatus(cudaEventCreateWithFlags(&impl.ready, cudaEventDisableTiming), "cudaEventCreate"));
  RETURN_IF_ERROR(
      CudaStatus(cudaEventCreateWithFlags(&impl.done, cudaEventDisableTiming), "cudaEventCreate"));

  // The unique id travels through the store.
  ncclUniqueId id;
  try {
    if (options.rank == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) {
        return absl::InternalError(absl::StrCat("ncclGetUniqueId: ", NcclText(r)));
      }
      store.set(kUniqueIdKey, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
    } else {
      store.wait({kUniqueIdKey}, options.timeout);
      const std::vector<char> bytes = store.get(kUniqueIdKey);
      if (bytes.size() != sizeof(id.internal)) {
        return absl::InvalidArgumentError(absl::StrCat("rendezvous: the NCCL unique id has ",
                                                       bytes.size(), " bytes, expected ",
                                                       sizeof(id.internal)));
      }
      std::memcpy(id.internal, bytes.data(), bytes.size());
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rank ", options.rank, ": rendezvous: ", e.what()));
  }

  // Non-blocking initialisation, so that a rank that never arrives is a
  // timeout rather than a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r =
      ncclCommInitRankConfig(&impl.comm, options.world_size, id, options.rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    return absl::UnavailableError(absl::StrCat("ncclCommInitRankConfig: ", NcclText(r)));
  }
  const auto deadline = Clock::now() + options.timeout;
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    ncclCommGetAsyncError(impl.comm, &state);
    if (state == ncclInProgress) {
      if (Clock::now() > deadline) {
        impl.broken = true;
        return absl::DeadlineExceededError(
            absl::StrCat("rank ", options.rank, ": NCCL initialisation did not finish within ",
                         options.timeout.count(), " ms (a rank did not join)"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (state != ncclSuccess) {
    impl.broken = true;
    return absl::UnavailableError(absl::StrCat("NCCL initialisation: ", NcclText(state)));
  }
  return self;
}

// The compute-queue mark of a CUDA rank: an event recorded on the compute
// stream, destroyed with the mark (a pending event may be destroyed: CUDA
// releases it once it completes).
struct NcclComputeMark final : ComputeMark {
  cudaEvent_t event = nullptr;
  ~NcclComputeMark() override {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

std::shared_ptr<const ComputeMark> NcclCommunicator::MarkCompute() {
  auto mark = std::make_shared<NcclComputeMark>();
  // Without an event the collective falls back to waiting for all compute
  // issued before it starts (correct, only less overlap).
  if (cudaSetDevice(options_.device) != cudaSuccess ||
      cudaEventCreateWithFlags(&mark->event, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();
    mark->event = nullptr;
    return nullptr;
  }
  if (cudaEventRecord(mark->event, static_cast<cudaStream_t>(options_.compute_stream)) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return mark;
}

absl::Status NcclCommunicator::Fail(absl::Status status) {
  // The one way out of a collective that was (or may have been) enqueued: a
  // collective that failed or timed out may still be running on the stream,
  // so abort the communicator (NCCL's kernels stop), then drain the stream,
  // then mark it broken. Only then may the caller release or reuse buffers.
  Impl& impl = *impl_;
  if (impl.comm != nullptr) ncclCommAbort(impl.comm);
  impl.comm = nullptr;
  (void)cudaStreamSynchronize(impl.stream);
  (void)cudaGetLastError();
  impl.broken = true;
  ++impl.aborts;
  return status;
}

absl::Status NcclCommunicator::Launch(const char* what, bool after_compute,
                                      const ComputeMark* after,
                                      const std::function<int(void* stream)>& enqueue) {
  Impl& impl = *impl_;
  const std::string where = absl::StrCat(what, " on rank ", rank(), " of ", world_size());
  if (impl.broken) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": an earlier collective failed; the communicator is unusable"));
  }
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice"));
  // The event that says this rank's own compute (the part the collective
  // reads) is done: the caller's mark, or one recorded now.
  cudaEvent_t ready = nullptr;
  if (after_compute) {
    const auto* mark = dynamic_cast<const NcclComputeMark*>(after);
    if (mark != nullptr && mark->event != nullptr) {
      ready = mark->event;
    } else {
      auto compute = static_cast<cudaStream_t>(options_.compute_stream);
      RETURN_IF_ERROR(CudaStatus(cudaEventRecord(impl.ready, compute), "cudaEventRecord"));
      ready = impl.ready;
    }
    RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(impl.stream, ready, 0), "cudaStreamWaitEvent"));
  }
  // From here on NCCL may hold the buffers: every failure goes through Fail.
  auto r = static_cast<ncclResult_t>(enqueue(impl.stream));
  // On a non-blocking communicator the collective may still be being
  // enqueued: the completion event must be recorded only once it is on the
  // stream, or the event would complete before the collective runs.
  if (r == ncclInProgress) r = WaitWhileInProgress(impl.comm, Clock::now() + options_.timeout);
  if (r == ncclSuccess && options_.fail_after_enqueue_for_testing) r = ncclInProgress;
  if (r == ncclInProgress) {
    return Fail(absl::DeadlineExceededError(
        absl::StrCat(where, ": NCCL did not enqueue it within ", options_.timeout.count(), " ms")));
  }
  if (r != ncclSuccess) return Fail(absl::UnavailableError(absl::StrCat(where, ": ", NcclText(r))));
  if (const cudaError_t e = cudaEventRecord(impl.done, impl.stream); e != cudaSuccess) {
    return Fail(absl::InternalError(
        absl::StrCat(where, ": cudaEventRecord after the collective: ", cudaGetErrorString(e))));
  }
  // The peers are given the timeout from when this rank's own queued work is
  // done (the compute the collective waits for may take longer than that).
  auto deadline = ready != nullptr ? Clock::time_point::max() : Clock::now() + options_.timeout;
  while (true) {
    const cudaError_t q = cudaEventQuery(impl.done);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) {
      return Fail(absl::InternalError(absl::StrCat(where, ": ", cudaGetErrorString(q))));
    }
    // "Not ready" is recorded as this thread's last CUDA error: clear it, or
    // the next kernel launch's check (cudaGetLastError) would take it for a
    // failed launch.
    (void)cudaGetLastError();
    if (deadline == Clock::time_point::max()) {
      const cudaError_t own = cudaEventQuery(ready);
      if (own == cudaSuccess) {
        deadline = Clock::now() + options_.timeout;
      } else if (own == cudaErrorNotReady) {
        (void)cudaGetLastError();
      } else {
        return Fail(absl::InternalError(absl::StrCat(where, ": ", cudaGetErrorString(own))));
      }
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(impl.comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      return Fail(
          absl::UnavailableError(absl::StrCat(where, ": a peer failed: ", NcclText(async))));
    }
    if (Clock::now() > deadline) {
      return Fail(absl::DeadlineExceededError(
          absl::StrCat(where, ": a peer did not answer within ", options_.timeout.count(), " ms")));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::ReduceScatterSum(float* data, int64_t chunk, float* accumulator,
                                                const ComputeMark* after) {
  if (chunk == 0) return absl::OkStatus();
  // In place: the output is chunk rank() of the input, as NCCL allows. The
  // accumulation runs on the same stream right after it, so the result never
  // makes a trip through the host or the compute stream.
  float* out = data + static_cast<int64_t>(rank()) * chunk;
  return Launch("reduce-scatter", /*after_compute=*/true, after, [&](void* stream) {
    auto s = static_cast<cudaStream_t>(stream);
    ncclResult_t r = ncclReduceScatter(data, out, static_cast<size_t>(chunk), ncclFloat, ncclSum,
                                       impl_->comm, s);
    // The addition must follow the collective on the stream: wait until
    // NCCL has really enqueued it. Still in progress after the timeout is
    // returned as is: Launch then aborts the communicator (Fail) before the
    // caller may reuse `data`.
    if (r == ncclInProgress && accumulator != nullptr) {
      r = WaitWhileInProgress(impl_->comm, Clock::now() + options_.timeout);
    }
    if (r == ncclSuccess && accumulator != nullptr) {
      cuda::LaunchAxpy(s, 1.0f, cuda::In{out, cuda::ElemType::kF32},
                       cuda::Out{accumulator, cuda::ElemType::kF32}, chunk);
    }
    return static_cast<int>(r);
  });
}

absl::Status NcclCommunicator::AllGather(void* data, int64_t chunk_bytes) {
  if (chunk_bytes == 0) return absl::OkStatus();
  const char* in = static_cast<const char*>(data) + static_cast<int64_t>(rank()) * chunk_bytes;
  return Launch("all-gather", /*after_compute=*/true, /*after=*/nullptr, [&](void* stream) {
    return static_cast<int>(ncclAllGather(in, data, static_cast<size_t>(chunk_bytes), ncclChar,
                                          impl_->comm, static_cast<cudaStream_t>(stream)));
  });
}

absl::Status NcclCommunicator::AllReduce(double* data, int64_t count, ReduceOp op) {
  if (count == 0) return absl::OkStatus();
  Impl& impl = *impl_;
  if (impl.staging_count < count) {
    if (impl.staging != nullptr) cudaFree(impl.staging);
    impl.staging = nullptr;
    impl.staging_count = 0;  // stays 0 if the allocation fails
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&impl.staging, count * sizeof(double)), "cudaMalloc"));
    impl.staging_count = count;
  }
  // The upload is ordered on the communicator's stream, before the
  // collective that reads it (the legacy default stream would not order it
  // against a non-blocking stream); the download waits for the stream.
  // Host values: nothing on the compute stream to wait for.
  RETURN_IF_ERROR(
      Launch("all-reduce", /*after_compute=*/false, /*after=*/nullptr, [&](void* stream) {
        auto s = static_cast<cudaStream_t>(stream);
        if (cudaMemcpyAsync(impl.staging, data, count * sizeof(double), cudaMemcpyHostToDevice,
                            s) != cudaSuccess) {
          cudaGetLastError();
          return static_cast<int>(ncclUnhandledCudaError);
        }
        return static_cast<int>(
            ncclAllReduce(impl.staging, impl.staging, static_cast<size_t>(count), ncclDouble,
                          op == ReduceOp::kSum ? ncclSum : ncclMax, impl.comm, s));
      }));
  const absl::Status copied = CudaStatus(cudaMemcpyAsync(data, impl.staging, count * sizeof(double),
                                                         cudaMemcpyDeviceToHost, impl.stream),
                                         "all-reduce: cudaMemcpyAsync");
  if (!copied.ok()) return Fail(copied);
  const absl::Status synced =
      CudaStatus(cudaStreamSynchronize(impl.stream), "all-reduce: cudaStreamSynchronize");
  return synced.ok() ? synced : Fail(synced);
}

absl::Status NcclCommunicator::AllToAll(const void* send, void* recv, int64_t block_bytes) {
  if (block_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-to-all: a block of ", block_bytes, " bytes"));
  }
  if (block_bytes == 0) return absl::OkStatus();
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  const size_t bytes = static_cast<size_t>(block_bytes);
  return Launch("all-to-all", /*after_compute=*/true, /*after=*/nullptr, [&](void* stream) {
    auto s = static_cast<cudaStream_t>(stream);
    // On a non-blocking communicator a call may answer ncclInProgress.
    auto failed = [](ncclResult_t x) { return x != ncclSuccess && x != ncclInProgress; };
    const ncclResult_t start = ncclGroupStart();
    if (failed(start)) return static_cast<int>(start);
    ncclResult_t r = ncclSuccess;
    for (int peer = 0; peer < world_size() && !failed(r); ++peer) {
      r = ncclSend(in + peer * bytes, bytes, ncclChar, peer, impl_->comm, s);
      if (!failed(r)) r = ncclRecv(out + peer * bytes, bytes, ncclChar, peer, impl_->comm, s);
    }
    // The group is closed even after a failed call inside it, and that
    // call's error is the one returned; otherwise ncclGroupEnd's answer
    // (ncclInProgress: Launch waits until it is enqueued).
    const ncclResult_t end = ncclGroupEnd();
    return static_cast<int>(failed(r) ? r : end);
  });
}

absl::Status NcclCommunicator::Broadcast(void* data, int64_t bytes, int root) {
  if (root < 0 || root >= world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is not a rank"));
  }
  if (bytes == 0) return absl::OkStatus();
  return Launch("broadcast", /*after_compute=*/true, /*after=*/nullptr, [&](void* stream) {
    return static_cast<int>(ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclChar, root,
                                          impl_->comm, static_cast<cudaStream_t>(stream)));
  });
}

absl::Status NcclCommunicator::Barrier() {
  double token = 0;
  return AllReduce(&token, 1, ReduceOp::kSum);
}

}  // namespace sbp
