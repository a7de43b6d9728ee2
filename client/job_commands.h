// The job verbs of `sbp` against a running coordinator: submit, list, get,
// watch, cancel and workers. Tables for people by default, `-o json` for
// scripts.
#pragma once

#include "CLI/CLI.hpp"
#include "client/coordinator_client.h"

namespace sbp::cli {

// `global` holds the parsed global flags when the callbacks run.
void AddJobCommands(CLI::App& app, const GlobalOptions* global, int* exit_code);

}  // namespace sbp::cli
