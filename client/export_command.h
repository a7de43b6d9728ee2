// `sbp export RUN_DIR|CHECKPOINT --out DIR [--model BASE]`: a clean Hugging
// Face model with nothing else in it: the weights (safetensors),
// config.json, generation_config.json and the tokenizer files. A run
// directory means its newest checkpoint (worker/train/checkpoint_argument.h);
// a LoRA checkpoint is merged into its base model (worker/train/lora_merge.h;
// the base its adapter_config.json names, or --model). Weights of a full
// checkpoint are copied byte for byte. --out must not exist or be an empty
// directory; the model is built beside it under a temporary name and
// appears there at once. Prints a JSON summary.
#pragma once

#include "CLI/CLI.hpp"

namespace sbp::cli {

void AddExportCommand(CLI::App& app, int* exit_code);

}  // namespace sbp::cli
