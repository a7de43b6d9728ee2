#include "kernels/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"

namespace sbp {

Buffer::~Buffer() {
  if (allocator_ != nullptr) allocator_->Release(data_, bytes_);
}

absl::StatusOr<std::shared_ptr<Buffer>> Allocator::Allocate(size_t bytes, absl::string_view what) {
  const size_t rounded = RoundedSize(bytes);
  int64_t prior_peak = 0, raised_peak_to = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t current = current_bytes();
    const int64_t budget = budget_bytes();
    if (budget > 0 && current + static_cast<int64_t>(rounded) > budget) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "out of memory on ", DeviceName(device()), ": allocating ", FormatByteSize(rounded), " (",
          rounded, " bytes) for '", what, "' with ", FormatByteSize(current),
          " in use would exceed the budget of ", FormatByteSize(budget), " (", budget, " bytes)"));
    }
    current_.store(current + static_cast<int64_t>(rounded));
    prior_peak = peak_bytes();
    if (current_bytes() > prior_peak) {
      peak_.store(current_bytes());
      raised_peak_to = current_bytes();
    }
  }
  absl::StatusOr<void*> data = RawAllocate(rounded);
  if (!data.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    current_.fetch_sub(static_cast<int64_t>(rounded));
    // A request the device refused never held memory: it is not a peak.
    if (raised_peak_to >= 0 && peak_bytes() == raised_peak_to) {
      peak_.store(std::max(prior_peak, current_bytes()));
    }
    return absl::Status(data.status().code(),
                        absl::StrCat("allocating ", FormatByteSize(rounded), " for '", what,
                                     "': ", data.status().message()));
  }
  return std::make_shared<Buffer>(this, *data, rounded);
}

void Allocator::RaisePeak(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > peak_bytes()) peak_.store(bytes);
}

void Allocator::Release(void* data, size_t rounded_bytes) {
  RawFree(data, rounded_bytes);
  std::lock_guard<std::mutex> lock(mu_);
  current_.fetch_sub(static_cast<int64_t>(rounded_bytes));
}

size_t CpuAllocator::RoundedSize(size_t bytes) const {
  if (bytes == 0) return kAlignment;
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

absl::StatusOr<void*> CpuAllocator::RawAllocate(size_t rounded_bytes) {
  if (rounded_bytes >= kMapThreshold) {
    void* mapped =
        mmap(nullptr, rounded_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) {
      return absl::ResourceExhaustedError("the operating system refused the host mapping");
    }
    return mapped;
  }
  void* data = std::aligned_alloc(kAlignment, rounded_bytes);
  if (data == nullptr) {
    return absl::ResourceExhaustedError("the operating system refused the host allocation");
  }
  return data;
}

void CpuAllocator::RawFree(void* data, size_t rounded_bytes) {
  if (rounded_bytes >= kMapThreshold) {
    munmap(data, rounded_bytes);
  } else {
    std::free(data);
  }
}

ScopedPeakReset::ScopedPeakReset(Allocator& allocator)
    : allocator_(allocator),
      saved_peak_(allocator.peak_bytes()),
      start_bytes_(allocator.current_bytes()) {
  allocator_.ResetPeak();
}

ScopedPeakReset::~ScopedPeakReset() { allocator_.RaisePeak(saved_peak_); }

}  // namespace sbp
