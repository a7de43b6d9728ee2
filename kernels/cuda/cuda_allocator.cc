#include "kernels/cuda/cuda_allocator.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "kernels/cuda/cuda_check.h"

namespace sbp {

absl::StatusOr<std::unique_ptr<CudaAllocator>> CudaAllocator::Create(int index) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the "no driver" error
    count = 0;
  }
  if (index < 0 || index >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device ", index, " (", count, " visible)"));
  }
  // Set-up failures are statuses naming the call: the caller reports them
  // and the process goes on (a worker keeps serving its other duties).
  auto failed = [index](cudaError_t status, const char* call) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat("cuda:", index, ": ", call,
                                                      " failed: ", cudaGetErrorName(status), " (",
                                                      cudaGetErrorString(status), ")"));
  };
  if (cudaError_t e = cudaSetDevice(index); e != cudaSuccess) return failed(e, "cudaSetDevice");
  // Allocations are stream-ordered from the device's memory pool; a device
  // or driver without pools (some virtualised or MIG set-ups, old drivers)
  // cannot run the engine's allocator.
  int pools_supported = 0;
  if (cudaError_t e =
          cudaDeviceGetAttribute(&pools_supported, cudaDevAttrMemoryPoolsSupported, index);
      e != cudaSuccess) {
    return failed(e, "cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported)");
  }
  if (pools_supported == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda:", index, " does not support stream-ordered memory pools ",
        "(cudaDevAttrMemoryPoolsSupported is 0), which the allocator needs; use a driver "
        "and device set-up with memory pools (CUDA 11.2 or newer, not vGPU without them)"));
  }
  cudaMemPool_t pool;
  if (cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, index); e != cudaSuccess) {
    return failed(e, "cudaDeviceGetDefaultMemPool");
  }
  // Keep freed blocks cached in the pool instead of returning them to the
  // driver at every synchronisation.
  uint64_t threshold = UINT64_MAX;
  if (cudaError_t e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
      e != cudaSuccess) {
    return failed(e, "cudaMemPoolSetAttribute");
  }
  cudaStream_t stream;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    return failed(e, "cudaStreamCreateWithFlags");
  }
  return std::unique_ptr<CudaAllocator>(new CudaAllocator(index, stream, pool));
}

CudaAllocator::~CudaAllocator() {
  // Every Buffer must be gone by now (the allocator outlives its tensors).
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
}

size_t CudaAllocator::RoundedSize(size_t bytes) const {
  if (bytes == 0) return kAlignment;
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

void CudaAllocator::DeviceMemory(int64_t* free_bytes, int64_t* total_bytes) const {
  SBP_CUDA_CHECK(cudaSetDevice(index_));
  size_t free_now = 0, total = 0;
  SBP_CUDA_CHECK(cudaMemGetInfo(&free_now, &total));
  *free_bytes = static_cast<int64_t>(free_now);
  *total_bytes = static_cast<int64_t>(total);
}

void CudaAllocator::ReleaseCachedMemory() {
  SBP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  SBP_CUDA_CHECK(cudaMemPoolTrimTo(pool_, 0));
}

absl::StatusOr<void*> CudaAllocator::RawAllocate(size_t rounded_bytes) {
  SBP_CUDA_CHECK(cudaSetDevice(index_));
  void* data = nullptr;
  cudaError_t status = cudaMallocFromPoolAsync(&data, rounded_bytes, pool_, stream_);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky, but clear it for later checks
    ReleaseCachedMemory();
    status = cudaMallocFromPoolAsync(&data, rounded_bytes, pool_, stream_);
  }
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    int64_t free_bytes = 0, total_bytes = 0;
    DeviceMemory(&free_bytes, &total_bytes);
    const int64_t before = current_bytes() - static_cast<int64_t>(rounded_bytes);
    return absl::ResourceExhaustedError(absl::StrCat(
        "the device is out of memory: ", DeviceName(device()), " has ", FormatByteSize(free_bytes),
        " free of ", FormatByteSize(total_bytes), "; this allocator ", "holds ",
        FormatByteSize(before), " (peak ", FormatByteSize(peak_bytes()), ")"));
  }
  if (status != cudaSuccess) {
    // Not out of memory: a device fault or a broken context. A status, not
    // an abort: the caller fails its step with the message.
    (void)cudaGetLastError();
    return absl::InternalError(
        absl::StrCat("allocating ", FormatByteSize(static_cast<int64_t>(rounded_bytes)), " on ",
                     DeviceName(device()), " failed: ", cudaGetErrorName(status), " (",
                     cudaGetErrorString(status), ")"));
  }
  return data;
}

void CudaAllocator::RawFree(void* data, size_t) {
  const cudaError_t status = cudaFreeAsync(data, stream_);
  // At process exit the runtime may already be unloading; nothing to free then.
  if (status == cudaErrorCudartUnloading) return;
  SBP_CUDA_CHECK(status);
}

}  // namespace sbp
