// The compute device of an engine command (`sbp grad`, `sbp bench`) and the
// model's weights and gradients on it. On the CPU the stores are allocated
// from the device's allocator directly (f32). On CUDA the weights are read
// (or initialised) on the host, copied to the device in the activation
// dtype (the compute copy: bf16 by default) and the host copy is dropped;
// the gradients are f32 on the device.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/compute_device.h"
#include "worker/engine/parameter_store.h"

namespace sbp::cli {

// `device`: cpu, cuda or cuda:N; `precision`: auto (bf16 on CUDA, fp32 on
// the CPU), fp32 or bf16.
absl::StatusOr<ComputeDevice> OpenCommandDevice(const std::string& device,
                                                const std::string& precision);

struct DeviceModel {
  ParameterStore weights;
  ParameterStore grads;  // zero
};

// Weights from a Hugging Face directory, or random ones of a preset (with
// `seed`) when `model_dir` is empty.
absl::StatusOr<DeviceModel> LoadDeviceModel(ComputeDevice& device, const std::string& model_dir,
                                            const std::string& preset, uint64_t seed);

}  // namespace sbp::cli
