// Following a job to its end (`sbp watch`, `submit --watch`, `sbp run`): its
// state changes with their reasons and a progress bar on stderr, then one
// summary line on stdout. Survives a coordinator restart by watching again
// (for up to two minutes of unavailability).
#pragma once

#include <string>

#include "client/coordinator_client.h"

namespace sbp::cli {

// Returns the exit code of the job's outcome: 0 SUCCEEDED, 1 FAILED or
// CANCELLED, 2 FAILED as bad input (spec, data or model); a failed RPC gives
// ReportRpcError's code.
int WatchJob(CoordinatorClient& client, const std::string& id, const std::string& command);

}  // namespace sbp::cli
