#include "worker/train/lora_adapters.h"

#include "common/status_macros.h"
#include "worker/engine/device_store.h"
#include "worker/engine/lora_store.h"

namespace sbp {

absl::StatusOr<std::optional<TrainedAdapters>> CreateTrainedAdapters(const LoraOptions& options,
                                                                     const ModelConfig& config,
                                                                     Backend& backend, DType dtype,
                                                                     int64_t pad_multiple) {
  if (!options.enabled()) return std::optional<TrainedAdapters>();
  std::optional<TrainedAdapters> out;
  out.emplace();
  out->host_allocator = std::make_unique<CpuAllocator>();
  ASSIGN_OR_RETURN(out->initial, CreateLoraStore(config, options, *out->host_allocator,
                                                 "LoRA adapters", pad_multiple));
  InitLoraWeights(out->initial);
  ASSIGN_OR_RETURN(out->compute, CopyStoreToDevice(out->initial, backend, dtype, "LoRA adapters"));
  return out;
}

}  // namespace sbp
