// `sbp train JOB.yaml`: run a job in this process (one worker, CPU).
#pragma once

#include "CLI/CLI.hpp"

namespace sbp::cli {

void AddTrainCommand(CLI::App& app, int* exit_code);

}  // namespace sbp::cli
