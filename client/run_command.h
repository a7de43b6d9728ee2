// `sbp run JOB.yaml [--workers N] [--state-dir DIR]`: the zero-setup path. One
// process starts an embedded coordinator (SQLite under --state-dir, default a
// fresh temporary directory removed afterwards; loopback, a free port, random
// tokens for both roles) and N local workers (default: the job's
// resources.world_size; fewer is refused, exit 2; the machine's memory split
// evenly, as device memory on the CPU and as host memory for the memory tiers
// (--host-memory), no offload disk for `checkpoints: auto` unless
// --offload-disk gives some; the current directory as work dir), submits the job, follows it
// with the progress bar and shuts everything down. Ctrl-C cancels the job.
// Exit code: 0 succeeded, 1 failed or cancelled, 2 the spec was rejected.
#pragma once

#include "CLI/CLI.hpp"

namespace sbp::cli {

void AddRunCommand(CLI::App& app, int* exit_code);

}  // namespace sbp::cli
