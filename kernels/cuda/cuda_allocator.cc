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
  SBP_CUDA_CHECK(cudaSetDevice(index));
  cudaMemPool_t pool;
  SBP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, index));
  // Keep freed blocks cached in the pool instead of returning them to the
  // driver at every synchronisation.
  uint64_t threshold = UINT64_MAX;
  SBP_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  cudaStream_t stream;
  SBP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
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
  SBP_CUDA_CHECK(status);
  return data;
}

void CudaAllocator::RawFree(void* data, size_t) {
  const cudaError_t status = cudaFreeAsync(data, stream_);
  // At process exit the runtime may already be unloading; nothing to free then.
  if (status == cudaErrorCudartUnloading) return;
  SBP_CUDA_CHECK(status);
}

}  // namespace sbp
