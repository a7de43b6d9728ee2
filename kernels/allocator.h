// Tracked memory. Every Allocator counts the bytes it currently holds and the
// peak since the last reset, and may enforce a budget: a request that would
// exceed it returns ResourceExhausted naming the request, the current use and
// the budget (it never aborts). Peak bytes are the engine's memory figure.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "kernels/dtype.h"

namespace sbp {

class Allocator;

// One allocation; returned to its allocator when the last owner drops it.
class Buffer {
 public:
  Buffer(Allocator* allocator, void* data, size_t bytes) noexcept
      : allocator_(allocator), data_(data), bytes_(bytes) {}
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Allocator* allocator() const { return allocator_; }

 private:
  Allocator* allocator_;
  void* data_;
  size_t bytes_;
};

class Allocator {
 public:
  virtual ~Allocator() = default;

  // `what` names the request in errors ("layer 3 K buffer").
  absl::StatusOr<std::shared_ptr<Buffer>> Allocate(size_t bytes, absl::string_view what);

  virtual Device device() const = 0;
  // Bytes a request of `bytes` really takes (alignment/rounding).
  virtual size_t RoundedSize(size_t bytes) const = 0;

  int64_t current_bytes() const { return current_.load(std::memory_order_relaxed); }
  int64_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  // 0 means no budget.
  int64_t budget_bytes() const { return budget_.load(std::memory_order_relaxed); }
  void set_budget_bytes(int64_t budget) { budget_.store(budget); }
  // Starts a new peak measurement at the current use.
  void ResetPeak() { peak_.store(current_bytes()); }
  // Raises the recorded peak to at least `bytes` (used to restore a peak
  // after a scoped measurement).
  void RaisePeak(int64_t bytes);

 protected:
  virtual absl::StatusOr<void*> RawAllocate(size_t rounded_bytes) = 0;
  virtual void RawFree(void* data, size_t rounded_bytes) = 0;

 private:
  friend class Buffer;
  void Release(void* data, size_t rounded_bytes);

  std::mutex mu_;
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> budget_{0};
};

// Host memory, 64-byte aligned (cache line, AVX-512 loads). Requests of
// kMapThreshold bytes or more are mapped from the OS directly and unmapped on
// release, so the process RSS follows the tracked figures (malloc would keep
// freed memory in its heap).
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kMapThreshold = size_t{1} << 20;
  Device device() const override { return Device::Cpu(); }
  size_t RoundedSize(size_t bytes) const override;

 protected:
  absl::StatusOr<void*> RawAllocate(size_t rounded_bytes) override;
  void RawFree(void* data, size_t rounded_bytes) override;
};

// Measures the peak of one phase: resets the allocator's peak on entry,
// reports the phase's peak, and on exit restores the overall peak so that the
// long-running figure is not lost.
class ScopedPeakReset {
 public:
  explicit ScopedPeakReset(Allocator& allocator);
  ~ScopedPeakReset();
  ScopedPeakReset(const ScopedPeakReset&) = delete;
  ScopedPeakReset& operator=(const ScopedPeakReset&) = delete;

  int64_t phase_peak_bytes() const { return allocator_.peak_bytes(); }
  int64_t start_bytes() const { return start_bytes_; }

 private:
  Allocator& allocator_;
  int64_t saved_peak_;
  int64_t start_bytes_;
};

}  // namespace sbp
