// `sbp grad`: loss and fp32 gradients of a batch from a JSONL file, written
// as safetensors under the parameters' Hugging Face names. --device cuda:N
// computes on a GPU (bf16 activations by default, --precision fp32 for f32).
#pragma once

#include "CLI/CLI.hpp"

namespace sbp::cli {

void AddGradCommand(CLI::App& app, int* exit_code);

}  // namespace sbp::cli
