// `sbp bench`: time and memory of one training step (forward + backward of
// one sequence) per backward mode, as JSON lines.
#pragma once

#include "CLI/CLI.hpp"

namespace sbp::cli {

void AddBenchCommand(CLI::App& app, int* exit_code);

}  // namespace sbp::cli
