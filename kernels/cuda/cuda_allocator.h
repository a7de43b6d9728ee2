// Tracked device memory of one GPU, with the contract of kernels/allocator.h
// (current, peak, optional budget; ResourceExhausted naming the request, the
// use and the budget, never an abort).
//
// Blocks come from CUDA's stream-ordered allocator: the device's default
// memory pool with its release threshold raised, so that freed blocks stay
// cached in the pool and are reused without a driver call. Allocation and
// release are ordered on the allocator's stream, which every op of the CUDA
// backend runs on: a block released by the host while queued kernels still
// read it is only handed to work queued after them. When the pool cannot
// grow, the allocator drains the stream, returns the cache to the driver and
// retries once before reporting ResourceExhausted with the device's free and
// total memory. The tracked figures count requested (rounded) bytes, not the
// pool's cache.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/allocator.h"

namespace sbp {

class CudaAllocator final : public Allocator {
 public:
  // 256 bytes: the alignment cuBLAS and 16-byte vector loads need.
  static constexpr size_t kAlignment = 256;

  // Binds CUDA device `index` and creates the stream; FailedPrecondition
  // without such a device.
  static absl::StatusOr<std::unique_ptr<CudaAllocator>> Create(int index);
  ~CudaAllocator() override;
  CudaAllocator(const CudaAllocator&) = delete;
  CudaAllocator& operator=(const CudaAllocator&) = delete;

  Device device() const override { return Device::Cuda(index_); }
  size_t RoundedSize(size_t bytes) const override;

  int index() const { return index_; }
  cudaStream_t stream() const { return stream_; }
  // Free and total device memory as the driver reports them.
  void DeviceMemory(int64_t* free_bytes, int64_t* total_bytes) const;
  // Waits for the stream, then returns the pool's cached blocks to the driver.
  void ReleaseCachedMemory();

 protected:
  absl::StatusOr<void*> RawAllocate(size_t rounded_bytes) override;
  void RawFree(void* data, size_t rounded_bytes) override;

 private:
  CudaAllocator(int index, cudaStream_t stream, cudaMemPool_t pool)
      : index_(index), stream_(stream), pool_(pool) {}

  int index_;
  cudaStream_t stream_;
  cudaMemPool_t pool_;
};

}  // namespace sbp
