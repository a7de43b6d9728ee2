// The control plane at cluster scale (sbp-bench-control-plane --scale): a
// coordinator process with a deep queue and many simulated workers, driven
// over gRPC on loopback. See control_plane_scale.cc.
#pragma once

#include <string>

namespace sbp::bench {

struct ScaleOptions {
  int queued_jobs = 100000;  // PENDING when the coordinator starts
  int workers = 1000;        // simulated, heartbeating at the interval Register gives
  int churn_workers = 20;    // of them, the ones that also finish jobs (worker transitions)
  int submits = 2000;        // measured Submits with the queue full
  int lists = 200;           // measured List calls of each page
  int seconds = 60;          // the heartbeats run at least this long
  std::string coordinator;   // the sbp-coordinator binary
  std::string dir;           // scratch directory (database, log)
};

// Prints one JSON line per measurement; returns 0, or 1 when a run failed.
int RunControlPlaneScale(const ScaleOptions& options);

}  // namespace sbp::bench
