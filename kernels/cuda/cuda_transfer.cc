#include "kernels/cuda/cuda_transfer.h"

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"

namespace sbp {
namespace {

absl::Status CopyError(const char* call, cudaError_t error, const Tensor& src, const Tensor& dst) {
  return absl::InternalError(absl::StrCat(
      "transfer of ", src.nbytes(), " bytes (", src.DebugString(), " -> ", dst.DebugString(),
      "): ", call, " failed: ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
}

}  // namespace

size_t PinnedHostAllocator::RoundedSize(size_t bytes) const {
  constexpr size_t kAlignment = 256;
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

absl::StatusOr<void*> PinnedHostAllocator::RawAllocate(size_t rounded_bytes) {
  void* data = nullptr;
  const cudaError_t error = cudaHostAlloc(&data, rounded_bytes, cudaHostAllocPortable);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it
    return absl::ResourceExhaustedError(
        absl::StrCat("pinned host memory: ", rounded_bytes,
                     " bytes could not be had: ", cudaGetErrorString(error)));
  }
  return data;
}

void PinnedHostAllocator::RawFree(void* data, size_t) { SBP_CUDA_CHECK(cudaFreeHost(data)); }

CudaTransferQueue::CudaTransferQueue(int device_index, cudaStream_t compute_stream)
    : device_index_(device_index), compute_stream_(compute_stream) {
  SBP_CUDA_CHECK(cudaSetDevice(device_index_));
  SBP_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
}

CudaTransferQueue::~CudaTransferQueue() {
  StopThread();  // every queued copy has run: its event is back in the pool
  for (cudaEvent_t e : spare_events_) (void)cudaEventDestroy(e);
  for (auto& [ticket, e] : queued_at_) (void)cudaEventDestroy(e);
  (void)cudaStreamDestroy(copy_stream_);
}

void CudaTransferQueue::BeforeCopyQueued(Ticket t) {
  std::lock_guard<std::mutex> lock(mu_);
  cudaEvent_t event;
  if (spare_events_.empty()) {
    SBP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  } else {
    event = spare_events_.back();
    spare_events_.pop_back();
  }
  SBP_CUDA_CHECK(cudaEventRecord(event, compute_stream_));
  queued_at_[t] = event;
}

absl::Status CudaTransferQueue::PerformCopy(Ticket t, const Tensor& src, const Tensor& dst) {
  cudaEvent_t event;
  {
    std::lock_guard<std::mutex> lock(mu_);
    event = queued_at_.at(t);
    queued_at_.erase(t);
  }
  // The queue's thread: bind the device once per copy (cheap).
  cudaError_t error = cudaSetDevice(device_index_);
  if (error == cudaSuccess) error = cudaStreamWaitEvent(copy_stream_, event, 0);
  if (error == cudaSuccess && src.nbytes() > 0) {
    error = cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDefault,
                            copy_stream_);
  }
  if (error == cudaSuccess) error = cudaStreamSynchronize(copy_stream_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    spare_events_.push_back(event);
  }
  if (error != cudaSuccess) return CopyError("cudaMemcpyAsync", error, src, dst);
  return absl::OkStatus();
}

}  // namespace sbp
