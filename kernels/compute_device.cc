#include "kernels/compute_device.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/byte_size.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/device_info.h"

#ifdef SBP_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_allocator.h"
#include "kernels/cuda/cuda_backend.h"
#endif

namespace sbp {
namespace {

absl::Status NoCudaDevice(int index) {
#ifdef SBP_WITH_CUDA
  const int count = CudaDeviceCount();
  if (index < count) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("no CUDA device ", index, " (", count, " visible)"));
#else
  return absl::FailedPreconditionError(
      absl::StrCat("cuda:", index, " requested but this build has no CUDA backend (",
                   CudaSupportSummary(), ")"));
#endif
}

}  // namespace

absl::StatusOr<Device> ParseDeviceName(absl::string_view name) {
  if (name == "cpu") return Device::Cpu();
  if (name == "cuda") return Device::Cuda(0);
  absl::string_view rest = name;
  int index = -1;
  if (absl::ConsumePrefix(&rest, "cuda:") && absl::SimpleAtoi(rest, &index) && index >= 0) {
    return Device::Cuda(index);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", name, "' (expected cpu, cuda or cuda:N)"));
}

DType DefaultActivationDType(Device device) { return device.is_cpu() ? DType::kF32 : DType::kBF16; }

absl::StatusOr<ComputeDevice> OpenComputeDevice(absl::string_view name, DType activation_dtype) {
  auto device = ParseDeviceName(name);
  if (!device.ok()) return device.status();
  ComputeDevice out;
  if (device->is_cpu()) {
    if (activation_dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("the CPU backend computes in f32; ",
                                                     DTypeName(activation_dtype),
                                                     " needs a CUDA device"));
    }
    out.allocator = std::make_unique<CpuAllocator>();
    out.backend = std::make_unique<CpuBackend>(*out.allocator);
    return out;
  }
  if (absl::Status s = NoCudaDevice(device->index); !s.ok()) return s;
#ifdef SBP_WITH_CUDA
  auto allocator = CudaAllocator::Create(device->index);
  if (!allocator.ok()) return allocator.status();
  CudaBackendOptions options;
  options.activation_dtype = activation_dtype;
  auto backend = CudaBackend::Create(**allocator, options);
  if (!backend.ok()) return backend.status();
  out.allocator = *std::move(allocator);
  out.backend = *std::move(backend);
  return out;
#else
  return NoCudaDevice(device->index);
#endif
}

absl::StatusOr<DeviceMemoryInfo> QueryDeviceMemory(Device device) {
  if (device.is_cpu()) {
    return absl::InvalidArgumentError("QueryDeviceMemory is for CUDA devices");
  }
  if (absl::Status s = NoCudaDevice(device.index); !s.ok()) return s;
#ifdef SBP_WITH_CUDA
  size_t total = 0;
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess || cudaSetDevice(device.index) != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat("cannot use cuda:", device.index));
  }
  size_t free_bytes = 0;
  const cudaError_t status = cudaMemGetInfo(&free_bytes, &total);
  cudaSetDevice(current);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("cudaMemGetInfo on cuda:", device.index, ": ", cudaGetErrorString(status)));
  }
  return DeviceMemoryInfo{static_cast<int64_t>(total), static_cast<int64_t>(free_bytes)};
#else
  return NoCudaDevice(device.index);
#endif
}

absl::StatusOr<int64_t> DeviceMemoryBudgetBytes(Device device) {
  absl::StatusOr<DeviceMemoryInfo> info = QueryDeviceMemory(device);
  if (!info.ok()) return info.status();
  if (info->free_bytes <= kCudaMemoryReserveBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda:", device.index, " has ", FormatByteSize(info->free_bytes), " free of ",
                     FormatByteSize(info->total_bytes), ", not more than the ",
                     FormatByteSize(kCudaMemoryReserveBytes),
                     " kept in reserve (other processes hold the rest)"));
  }
  return info->free_bytes - kCudaMemoryReserveBytes;
}

}  // namespace sbp
