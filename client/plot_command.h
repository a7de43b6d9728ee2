// `sbp plot ID|RUN_DIR [--out loss.png] [--width W --height H] [--metric M ...]
// [--log-y] [--terminal]`: a run's loss curve (and eval loss) as a PNG, and
// without --out (or with --terminal) as a compact chart on stdout.
#pragma once

#include "CLI/CLI.hpp"
#include "client/plot/run_metrics.h"

namespace sbp::cli {

// `job_metrics` serves the lines of a job id (the coordinator's metrics);
// without one, a target that is not a path is refused saying so.
void AddPlotCommand(CLI::App& app, int* exit_code, plot::JobMetricsSource job_metrics = nullptr);

}  // namespace sbp::cli
