// `sbp grad`: loss and fp32 gradients of a batch from a JSONL file, written
// as safetensors under the parameters' Hugging Face names.
#pragma once

#include "CLI/CLI.hpp"

namespace sbp::cli {

void AddGradCommand(CLI::App& app, int* exit_code);

}  // namespace sbp::cli
