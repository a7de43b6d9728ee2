// The CUDA backend's memory tiers: pinned host memory (so that copies to and
// from it run asynchronously, at the link's full rate) and a transfer queue
// whose copies run on a stream of their own, beside the compute stream.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/allocator.h"
#include "kernels/transfer_queue.h"

namespace sbp {

// Page-locked host memory (cudaHostAlloc, portable across devices), tracked
// like every allocator; a failed request is ResourceExhausted naming it.
class PinnedHostAllocator final : public Allocator {
 public:
  Device device() const override { return Device::Cpu(); }
  size_t RoundedSize(size_t bytes) const override;

 protected:
  absl::StatusOr<void*> RawAllocate(size_t rounded_bytes) override;
  void RawFree(void* data, size_t rounded_bytes) override;
};

// Copy items: the queue's thread makes its copy stream wait on an event
// recorded on the compute stream when the copy was queued (so the copy sees
// every op issued before it), issues cudaMemcpyAsync and waits for it. A CUDA
// error fails the item (and the queue) with a status naming the copy.
class CudaTransferQueue final : public ThreadTransferQueue {
 public:
  CudaTransferQueue(int device_index, cudaStream_t compute_stream);
  ~CudaTransferQueue() override;

 protected:
  void BeforeCopyQueued(Ticket t) override;
  absl::Status PerformCopy(Ticket t, const Tensor& src, const Tensor& dst) override;

 private:
  int device_index_;
  cudaStream_t compute_stream_;
  cudaStream_t copy_stream_ = nullptr;
  std::mutex mu_;
  std::unordered_map<Ticket, cudaEvent_t> queued_at_;  // per copy not yet run
  std::vector<cudaEvent_t> spare_events_;
};

}  // namespace sbp
