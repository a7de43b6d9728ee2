// `sbp metrics ID` and `sbp logs ID`: a job's per-step metrics and its
// workers' log lines as the coordinator keeps them (JobService.Metrics and
// Logs), for users without the run directory or the worker's log at hand.
// `--follow` streams new lines until the job has ended.
#pragma once

#include "CLI/CLI.hpp"
#include "client/coordinator_client.h"

namespace sbp::cli {

// `global` holds the parsed global flags when the callbacks run.
void AddOutputCommands(CLI::App& app, const GlobalOptions* global, int* exit_code);

}  // namespace sbp::cli
