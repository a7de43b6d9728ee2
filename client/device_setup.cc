#include "client/device_setup.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/device_store.h"
#include "worker/model/model_io.h"

namespace sbp::cli {

absl::StatusOr<ComputeDevice> OpenCommandDevice(const std::string& device,
                                                const std::string& precision) {
  ASSIGN_OR_RETURN(Device parsed, ParseDeviceName(device));
  DType dtype = DefaultActivationDType(parsed);
  if (precision == "fp32") {
    dtype = DType::kF32;
  } else if (precision == "bf16") {
    dtype = DType::kBF16;
  } else if (precision != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--precision: expected auto, fp32 or bf16 (got ", precision, ")"));
  }
  return OpenComputeDevice(device, dtype);
}

absl::StatusOr<DeviceModel> LoadDeviceModel(ComputeDevice& device, const std::string& model_dir,
                                            const std::string& preset, uint64_t seed) {
  Backend& backend = *device.backend;
  const bool on_host = backend.device().is_cpu();
  // The host store: the device's own allocator on the CPU, a staging one otherwise.
  CpuAllocator staging;
  Allocator& host_allocator = on_host ? *device.allocator : staging;
  DeviceModel model;
  ParameterStore host;
  if (!model_dir.empty()) {
    ASSIGN_OR_RETURN(host, ParameterStore::Load(model_dir, host_allocator, "weights"));
  } else {
    ASSIGN_OR_RETURN(ModelConfig config, PresetConfig(preset));
    CpuAllocator init_staging;
    ASSIGN_OR_RETURN(ModelWeights fresh, InitModelWeights(config, seed, init_staging));
    ASSIGN_OR_RETURN(host, ParameterStore::FromWeights(fresh, host_allocator, "weights"));
  }
  if (on_host) {
    model.weights = std::move(host);
    ASSIGN_OR_RETURN(model.grads, ParameterStore::Create(model.weights.config(), *device.allocator,
                                                         "gradients"));
    return model;
  }
  ASSIGN_OR_RETURN(model.weights,
                   CopyStoreToDevice(host, backend, backend.activation_dtype(), "weights"));
  ASSIGN_OR_RETURN(model.grads, ZeroStoreOnDevice(host, backend, DType::kF32, "gradients"));
  backend.Synchronize();
  return model;
}

}  // namespace sbp::cli
