// PEFT adapter directories, as peft's save_pretrained writes them and
// PeftModel.from_pretrained reads them:
//
//   adapter_config.json        {"peft_type": "LORA", "task_type": "CAUSAL_LM",
//                               "r", "lora_alpha", "target_modules",
//                               "use_rslora", "lora_dropout": 0, "bias": "none", ...}
//   adapter_model.safetensors  base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight
//                              [r, in] and ...lora_B.weight [out, r], f32
//
// Only plain LoRA is read: DoRA, biases, fan_in_fan_out, per-layer rank or
// alpha patterns, layer subsets, modules_to_save and regex target_modules
// are refused with a message naming the field.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/lora_options.h"
#include "worker/engine/parameter_store.h"

namespace sbp {

// adapter_config.json for `options` (base_model_name_or_path: `base_model`,
// null when empty).
std::string PeftAdapterConfigJson(const LoraOptions& options, const std::string& base_model = "");

// Writes adapter_config.json and adapter_model.safetensors of `adapters`
// (a host f32 adapter store) into the existing directory `dir`, each file
// atomically.
absl::Status SavePeftAdapter(const std::string& dir, const ParameterStore& adapters,
                             const std::string& base_model = "");

// `dir`/adapter_config.json's base_model_name_or_path ("" when null or absent).
absl::StatusOr<std::string> ReadPeftBaseModel(const std::string& dir);

// The LoRA options of `dir`/adapter_config.json (init_seed 0).
absl::StatusOr<LoraOptions> ReadPeftAdapterConfig(const std::string& dir);

// Reads `dir`'s adapter_model.safetensors into `adapters` (host f32, its
// layout): every adapter tensor of the store must be there with its shape,
// and the config must match the store's rank and modules.
absl::Status LoadPeftAdapter(const std::string& dir, ParameterStore& adapters);

}  // namespace sbp
