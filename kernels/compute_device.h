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

// Total memory of a CUDA device (what a worker advertises); FailedPrecondition
// as above, InvalidArgument for the CPU.
absl::StatusOr<int64_t> DeviceMemoryBytes(Device device);

}  // namespace sbp
