// `sbp model init`: write a model directory (config.json + model.safetensors)
// from a preset or a config file, with seeded random weights.
#pragma once

#include "CLI/CLI.hpp"

namespace sbp::cli {

void AddModelCommand(CLI::App& app, int* exit_code);

}  // namespace sbp::cli
