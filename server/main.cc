// sbp-coordinator: the control-plane server. Flags:
//   --listen HOST:PORT          gRPC address (default 127.0.0.1:7700; port 0 picks one)
//   --metrics-listen HOST:PORT  Prometheus /metrics (default: off)
//   --db FILE                   SQLite database (required)
//   --client-token-file FILE    bearer token for JobService (default: open)
//   --worker-token-file FILE    bearer token for WorkerService/RendezvousService (default: open)
//   --tls-cert FILE --tls-key FILE   serve TLS (both or neither)
//   --tls-refresh-seconds N          re-read them this often (a rotated certificate)
//   --lease-seconds N           worker lease (default 15)
//   --stall-seconds N           fail an attempt without progress for N s (default 600)
//   --preemption-grace N        a preempted attempt checkpoints and stops within N s,
//                               else it is ended anyway (default 60)
//   --work-dir DIR              relative model paths of job specs resolve here for
//                               memory planning at submit (default: not resolved)
//   --max-threads N             gRPC handler threads (default 256); a quarter may
//                               serve client calls, half the workers' long polls
//   --max-streams N             open Watch + reflection streams (default 4096)
//   --max-streams-per-client N  of them of one identity (reflection: one address; default 1024)
//   --max-reflection-streams N  of them server reflection (default 256)
//   --max-streams-per-connection N  HTTP/2 streams per connection (default 100)
//   --max-message-size SIZE     largest request accepted (default 4MiB)
//   --max-metrics-lines N --max-metrics-bytes SIZE   metrics lines kept per attempt and
//                               rank (default 100000, 64MiB; beyond: thinned)
//   --max-log-lines N --max-log-bytes SIZE   log lines kept per attempt and rank
//                               (default 100000, 16MiB; beyond: the oldest after the first
//                               tenth are dropped)
// SIGTERM or SIGINT shuts down gracefully. Exit codes: 0 clean stop, 1 could
// not start, 2 bad flags or an unusable database (another coordinator holds
// it, or its schema is newer than this build's).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <tuple>

#include "absl/strings/ascii.h"
#include "common/bearer_token.h"
#include "common/byte_size.h"
#include "common/logging.h"
#include "server/coordinator.h"
#include "server/retention.h"

namespace {

// The token of a token file (common/bearer_token.h); false with the reason,
// which never shows the token.
bool ReadToken(const std::string& path, std::string* token, std::string* error) {
  absl::StatusOr<std::string> read = sbp::ReadBearerTokenFile(path);
  if (!read.ok()) {
    *error = std::string(read.status().message());
    return false;
  }
  *token = *std::move(read);
  return true;
}

int Run(int argc, char** argv) {
  sbp::server::CoordinatorOptions options;
  std::string client_token_file, worker_token_file;
  CLI::App app{
      "sbp-coordinator: queues StreamBP training jobs and gang-schedules them onto "
      "workers"};
  app.add_option("--listen", options.listen, "gRPC address HOST:PORT (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--metrics-listen", options.metrics_listen,
                 "Prometheus endpoint HOST:PORT serving /metrics (default: off)");
  app.add_option("--db", options.db_path, "SQLite database file (created when missing)")
      ->required();
  app.add_option("--users", options.users_path,
                 "YAML file of users (name, role, token hashes, quotas) and worker identities; "
                 "reloaded on SIGHUP and when it changes")
      ->check(CLI::ExistingFile);
  app.add_flag("--insecure", options.insecure,
               "allow a role without tokens on a non-loopback address (warns on every start)");
  app.add_option("--client-token-file", client_token_file,
                 "File with the bearer token clients must send (single-user shorthand for --users)")
      ->check(CLI::ExistingFile);
  app.add_option("--worker-token-file", worker_token_file,
                 "File with the bearer token workers must send (single-user shorthand for --users)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-cert", options.tls_cert_path, "PEM certificate chain for TLS")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", options.tls_key_path, "PEM private key for TLS")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-refresh-seconds", options.tls_refresh_seconds,
                 "How often the TLS files are re-read, so that a rotated certificate is served")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  app.add_option("--lease-seconds", options.lease_seconds,
                 "A worker without a heartbeat for this long is lost")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  app.add_option("--stall-seconds", options.stall_seconds,
                 "A running attempt without progress for this long is failed and retried")
      ->capture_default_str()
      ->check(CLI::Range(1, 7 * 86400));
  app.add_option("--preemption-grace", options.preemption_grace_seconds,
                 "Seconds a preempted attempt has to checkpoint at its next step boundary and "
                 "stop; after that it is ended anyway and resumes from its last checkpoint")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  app.add_option("--work-dir", options.work_dir,
                 "The workers' shared directory, as their --work-dir: every job path resolves in "
                 "its owner's area, <work-dir>/<user>/ with --users (the work directory itself "
                 "without), and model paths are read there for memory planning at submit "
                 "(default: paths are not confined nor planned)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--shared-dir", options.shared_dir,
                 "A read-only root job models and data may also come from, by absolute path "
                 "(it may be created later, e.g. on a fresh volume)");
  sbp::server::RpcLimits& limits = options.limits;
  app.add_option("--max-threads", limits.max_threads,
                 "gRPC handler threads; a quarter may serve client calls and half the workers' "
                 "waiting calls, the rest is kept for heartbeats (at least 4 per worker)")
      ->capture_default_str()
      ->check(CLI::Range(32, 65536));
  app.add_option("--max-streams", limits.max_streams,
                 "Open Watch and reflection streams, all clients together")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-streams-per-client", limits.max_streams_per_client,
                 "Open Watch streams of one identity (reflection streams, which carry no token: "
                 "of one address)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-reflection-streams", limits.max_reflection_streams,
                 "Open server reflection streams (they need no token)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-streams-per-connection", options.max_streams_per_connection,
                 "Concurrent HTTP/2 streams on one client connection")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  std::string retain_finished = "30d";
  app.add_option(
         "--retain-finished", retain_finished,
         "Ended jobs (succeeded, failed, cancelled) are removed from the database this long "
         "after they ended: a number with s, m, h or d; 0 keeps them (run directories are "
         "never touched)")
      ->capture_default_str();
  std::string retention_interval = "60s";
  app.add_option("--retention-interval", retention_interval,
                 "How often the retention policy runs (an age like --retain-finished)")
      ->capture_default_str();
  app.add_option("--max-finished-per-user", options.max_finished_per_user,
                 "Ended jobs kept per user, newest first; 0: any number")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  std::string max_spec_bytes = "256MiB";
  app.add_option("--max-spec-bytes-per-user", max_spec_bytes,
                 "Job specs one user may have stored, counted at submit; 0: no limit")
      ->capture_default_str();
  std::string max_message_size = "4MiB";
  app.add_option("--max-message-size", max_message_size,
                 "Largest request message accepted (e.g. 4MiB)")
      ->capture_default_str();
  // What is kept of each attempt and rank's output (server/job_output.h).
  app.add_option("--max-metrics-lines", options.metrics_caps.max_lines,
                 "Metrics lines kept per attempt and rank; beyond, they are thinned evenly "
                 "(every 2nd, 4th, ... line kept)")
      ->capture_default_str();
  std::string max_metrics_bytes = "64MiB";
  app.add_option("--max-metrics-bytes", max_metrics_bytes,
                 "Metrics bytes kept per attempt and rank (thinned beyond, as above)")
      ->capture_default_str();
  app.add_option("--max-log-lines", options.log_caps.max_lines,
                 "Log lines kept per attempt and rank; beyond, the first tenth stays and the "
                 "oldest of the rest are dropped")
      ->capture_default_str();
  std::string max_log_bytes = "16MiB";
  app.add_option("--max-log-bytes", max_log_bytes,
                 "Log bytes kept per attempt and rank (dropped beyond, as above)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (options.tls_cert_path.empty() != options.tls_key_path.empty()) {
    std::cerr << "sbp-coordinator: give both --tls-cert and --tls-key, or neither\n";
    return 2;
  }
  absl::StatusOr<absl::Duration> retain = sbp::server::ParseRetentionAge(retain_finished);
  if (!retain.ok()) {
    std::cerr << "sbp-coordinator: --retain-finished: " << retain.status().message() << "\n";
    return 2;
  }
  options.retain_finished = *retain;
  absl::StatusOr<absl::Duration> interval = sbp::server::ParseRetentionAge(retention_interval);
  if (!interval.ok() || *interval <= absl::ZeroDuration()) {
    std::cerr << "sbp-coordinator: --retention-interval: expected a positive age like 60s (got \""
              << retention_interval << "\")\n";
    return 2;
  }
  options.retention_interval = *interval;
  absl::StatusOr<int64_t> spec_bytes = sbp::ParseByteSize(max_spec_bytes);  // "0": no limit
  if (!spec_bytes.ok()) {
    std::cerr << "sbp-coordinator: --max-spec-bytes-per-user: expected a size like 256MiB or 0 "
              << "(got \"" << max_spec_bytes << "\")\n";
    return 2;
  }
  options.max_spec_bytes_per_user = *spec_bytes;
  absl::StatusOr<int64_t> message_bytes = sbp::ParseByteSize(max_message_size);
  if (!message_bytes.ok() || *message_bytes < 64 * 1024 || *message_bytes > (1 << 30)) {
    std::cerr << "sbp-coordinator: --max-message-size: must be a size from 64KiB to 1GiB (got \""
              << max_message_size << "\")\n";
    return 2;
  }
  options.max_message_bytes = static_cast<int>(*message_bytes);
  for (const auto& [flag, text, bytes] :
       {std::tuple{"--max-metrics-bytes", &max_metrics_bytes, &options.metrics_caps.max_bytes},
        std::tuple{"--max-log-bytes", &max_log_bytes, &options.log_caps.max_bytes}}) {
    absl::StatusOr<int64_t> parsed = sbp::ParseByteSize(*text);
    if (!parsed.ok()) {
      std::cerr << "sbp-coordinator: " << flag << ": expected a size like 16MiB (got \"" << *text
                << "\")\n";
      return 2;
    }
    *bytes = *parsed;
  }
  std::string error;
  if (!client_token_file.empty() && !ReadToken(client_token_file, &options.client_token, &error)) {
    std::cerr << "sbp-coordinator: --client-token-file: " << error << "\n";
    return 2;
  }
  if (!worker_token_file.empty() && !ReadToken(worker_token_file, &options.worker_token, &error)) {
    std::cerr << "sbp-coordinator: --worker-token-file: " << error << "\n";
    return 2;
  }

  // Block the stop signals in every thread; the main thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto coordinator = sbp::server::Coordinator::Start(options);
  if (!coordinator.ok()) {
    std::cerr << "sbp-coordinator: " << coordinator.status().message() << "\n";
    const absl::StatusCode code = coordinator.status().code();
    return code == absl::StatusCode::kInvalidArgument ||
                   code == absl::StatusCode::kFailedPrecondition
               ? 2
               : 1;
  }
  int signal_number = 0;
  while (sigwait(&stop_signals, &signal_number) == 0 && signal_number == SIGHUP) {
    if (absl::Status s = (*coordinator)->ReloadIdentities(); !s.ok()) {
      LOG(ERROR) << "SIGHUP: users file not reloaded (the previous identities stay in force): "
                 << s;
    }
  }
  LOG(INFO) << "received " << (signal_number == SIGTERM ? "SIGTERM" : "SIGINT")
            << "; shutting down";
  (*coordinator)->Shutdown();
  coordinator->reset();  // closes the database before static teardown
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "sbp-coordinator: " << e.what() << "\n";
    return 1;
  }
}
