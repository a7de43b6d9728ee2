// The compute device a command or a worker runs on, chosen by name: "cpu",
// "cuda" (= cuda:0) or "cuda:N". Opening one gives its allocator and backend.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/allocator.h"
#include "kernels/backend.h"

namespace sbp {

struct ComputeDevice {
  std::unique_ptr<Allocator> allocator;
  std::unique_ptr<Backend> backend;  // declared last: destroyed before its allocator
};

// InvalidArgument naming the text when it is none of the forms above.
absl::StatusOr<Device> ParseDeviceName(absl::string_view name);

// bf16 on CUDA, f32 on the CPU (whose backend computes in f32 only).
DType DefaultActivationDType(Device device);

// FailedPrecondition when CUDA is not compiled in or the device does not
// exist; InvalidArgument for an activation dtype the backend cannot store.
absl::StatusOr<ComputeDevice> OpenComputeDevice(absl::string_view name, DType activation_dtype);

// Memory of a CUDA device, as the driver reports it now; FailedPrecondition
// as above, InvalidArgument for the CPU.
struct DeviceMemoryInfo {
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;  // after this process's own CUDA context
};
absl::StatusOr<DeviceMemoryInfo> QueryDeviceMemory(Device device);

// Kept free on a GPU below what a worker may budget: memory that is taken
// later and outside the allocator (NCCL's buffers, ~256 MiB a communicator;
// cuBLAS's internal state) and the memory pool's fragmentation.
inline constexpr int64_t kCudaMemoryReserveBytes = int64_t{1} << 30;

// What a GPU worker (and `sbp bench`) budgets: the device's free memory at
// start (not its total: another process or the display may hold some) less
// kCudaMemoryReserveBytes; FailedPrecondition when less than the reserve is
// free.
absl::StatusOr<int64_t> DeviceMemoryBudgetBytes(Device device);

}  // namespace sbp
