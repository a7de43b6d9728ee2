// The coordinator as a library: SQLite store, job manager, gRPC services
// (JobService, WorkerService, RendezvousService, grpc.health.v1, reflection),
// the lease/stall monitor and the Prometheus endpoint. `sbp-coordinator`
// wraps it in a binary; `sbp run` embeds it in-process.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "prometheus/registry.h"
#include "server/job_output.h"
#include "server/rpc_guard.h"

namespace sbp::server {

struct CoordinatorOptions {
  std::string listen = "127.0.0.1:7700";  // "host:0" picks a free port
  std::string metrics_listen;             // "" = no metrics endpoint; "host:0" free port
  std::string db_path;                    // SQLite file (required)
  // Identities: a users file (server/identity.h), reloaded on Reload() and
  // when it changes; or the single-user shorthand of two tokens. A role with
  // no identity is open, which is refused on a non-loopback address unless
  // `insecure`.
  std::string users_path;
  std::string client_token, worker_token;
  bool insecure = false;
  std::string tls_cert_path, tls_key_path;  // both or neither
  // How often the TLS files are checked for a rotated certificate.
  int tls_refresh_seconds = 60;
  int lease_seconds = 15, stall_seconds = 600;
  // How long a preempted attempt has to checkpoint and stop before it is
  // ended anyway (server/job_manager_preemption.cc).
  int preemption_grace_seconds = 60;
  // Where relative model paths of job specs resolve for memory planning at
  // submit (as workers resolve them under their --work-dir); "": not resolved.
  std::string work_dir;
  std::string shared_dir;  // read-only job paths may also lie here
  // false: job paths resolve in work_dir but go anywhere (the embedded
  // coordinator of `sbp run`, serving its one local user).
  bool confine_paths = true;
  // Retention of ended jobs and the per-user cap on stored specs
  // (JobManagerOptions; 0: none).
  absl::Duration retain_finished = absl::Hours(24 * 30);
  int64_t max_finished_per_user = 10000;
  absl::Duration retention_interval = absl::Minutes(1);
  int64_t max_spec_bytes_per_user = int64_t{256} << 20;
  // Limits on what clients can make the coordinator hold: threads, calls in
  // flight, open streams (server/rpc_guard.h explains how they keep worker
  // heartbeats served), HTTP/2 streams per connection and request size.
  RpcLimits limits;
  int max_streams_per_connection = 100;
  int max_message_bytes = 4 << 20;
  // What is kept of each attempt and rank's metrics and log lines
  // (server/job_output.h).
  OutputCaps metrics_caps = kDefaultMetricsCaps;
  OutputCaps log_caps = kDefaultLogCaps;
};

class Coordinator {
 public:
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(const CoordinatorOptions& options);
  std::string address() const;          // "127.0.0.1:PORT" actually bound
  std::string metrics_address() const;  // "" when none
  // The metrics it serves (also without an endpoint: benchmarks read them).
  std::shared_ptr<prometheus::Registry> metrics_registry() const;
  void Shutdown();  // graceful, idempotent
  // Re-reads the users file now (SIGHUP); errors keep the old identities.
  absl::Status ReloadIdentities();
  ~Coordinator();  // calls Shutdown

  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

 private:
  struct Impl;
  explicit Coordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sbp::server
