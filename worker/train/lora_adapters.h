// The adapters of a LoRA run (job spec `lora:`): PEFT-initialised f32 values
// in host memory, where separate fp32 masters start from, and the compute
// copy on the run's device (in the job's precision) that the engine reads
// and the optimizer updates. Groups are padded for ZeRO-2 like the weights.
#pragma once

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "kernels/allocator.h"
#include "kernels/backend.h"
#include "worker/engine/lora_options.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_config.h"

namespace sbp {

struct TrainedAdapters {
  std::unique_ptr<CpuAllocator> host_allocator;  // holds `initial`
  ParameterStore initial;                        // host f32
  ParameterStore compute;                        // on the device, compute dtype
};

// nullopt when `options` do not enable LoRA.
absl::StatusOr<std::optional<TrainedAdapters>> CreateTrainedAdapters(const LoraOptions& options,
                                                                     const ModelConfig& config,
                                                                     Backend& backend, DType dtype,
                                                                     int64_t pad_multiple);

}  // namespace sbp
