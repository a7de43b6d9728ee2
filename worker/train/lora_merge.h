// `sbp lora merge`: a LoRA adapter folded into its base model,
//
//   W' = W + s B A      for every adapter (A [r, in], B [out, r], s its scaling),
//
// written as a Hugging Face model directory (config.json + safetensors) in
// the base model's dtype (its torch_dtype: bf16 stays bf16, f16 is written
// as f32), which transformers loads without peft. The sums are fp32 GEMMs
// like peft's merge_and_unload. Other files of the base directory (tokenizer,
// generation config) are copied beside the weights.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace sbp {

// Writes the merged model to `out_dir` (created; an existing directory's
// weight files are replaced). Returns a summary: base, adapter, out, r,
// lora_alpha, scaling, merged (tensor count), dtype.
absl::StatusOr<nlohmann::json> MergeLoraAdapter(const std::string& base_dir,
                                                const std::string& adapter_dir,
                                                const std::string& out_dir);

}  // namespace sbp
