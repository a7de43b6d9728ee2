// `sbp health`: asks the coordinator's grpc.health.v1.Health/Check whether it
// serves, without a token (for container health checks and probes). Prints the
// serving status; exit 0 when SERVING, 1 otherwise or when unreachable, 2 for
// bad flags.
#pragma once

#include "CLI/CLI.hpp"
#include "client/coordinator_client.h"

namespace sbp::cli {

// `global` holds the parsed global flags (--coordinator, --tls-ca) when the
// callback runs.
void AddHealthCommand(CLI::App& app, const GlobalOptions* global, int* exit_code);

}  // namespace sbp::cli
