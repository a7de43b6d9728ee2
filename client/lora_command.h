// `sbp lora merge --model BASE --adapter DIR --out DIR`: fold a PEFT LoRA
// adapter (a LoRA run's checkpoint, or one peft saved) into its base model
// and write a plain Hugging Face model directory (worker/train/lora_merge.h).
#pragma once

#include "CLI/CLI.hpp"

namespace sbp::cli {

void AddLoraCommand(CLI::App& app, int* exit_code);

}  // namespace sbp::cli
