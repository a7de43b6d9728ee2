// sbp-coordinator: the control-plane server. Flags:
//   --listen HOST:PORT          gRPC address (default 127.0.0.1:7700; port 0 picks one)
//   --metrics-listen HOST:PORT  Prometheus /metrics (default: off)
//   --db FILE                   SQLite database (required)
//   --client-token-file FILE    bearer token for JobService (default: open)
//   --worker-token-file FILE    bearer token for WorkerService/RendezvousService (default: open)
//   --tls-cert FILE --tls-key FILE   serve TLS (both or neither)
//   --lease-seconds N           worker lease (default 15)
//   --stall-seconds N           fail an attempt without progress for N s (default 600)
//   --work-dir DIR              relative model paths of job specs resolve here for
//                               memory planning at submit (default: not resolved)
// SIGTERM or SIGINT shuts down gracefully. Exit codes: 0 clean stop, 1 could
// not start, 2 bad flags.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "common/logging.h"
#include "server/coordinator.h"

namespace {

// The first line of a token file, whitespace trimmed; false when unreadable or empty.
bool ReadToken(const std::string& path, std::string* token, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot read token file " + path;
    return false;
  }
  std::string line;
  std::getline(in, line);
  *token = std::string(absl::StripAsciiWhitespace(line));
  if (token->empty()) {
    *error = "token file " + path + " is empty";
    return false;
  }
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
  app.add_option("--client-token-file", client_token_file,
                 "File with the bearer token clients must send (default: no client auth)")
      ->check(CLI::ExistingFile);
  app.add_option("--worker-token-file", worker_token_file,
                 "File with the bearer token workers must send (default: no worker auth)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-cert", options.tls_cert_path, "PEM certificate chain for TLS")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", options.tls_key_path, "PEM private key for TLS")
      ->check(CLI::ExistingFile);
  app.add_option("--lease-seconds", options.lease_seconds,
                 "A worker without a heartbeat for this long is lost")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  app.add_option("--stall-seconds", options.stall_seconds,
                 "A running attempt without progress for this long is failed and retried")
      ->capture_default_str()
      ->check(CLI::Range(1, 7 * 86400));
  app.add_option("--work-dir", options.work_dir,
                 "Directory that relative model paths in job specs resolve against for memory "
                 "planning at submit, as workers' --work-dir (default: relative paths are not "
                 "planned; absolute paths and preset names are)")
      ->check(CLI::ExistingDirectory);
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
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto coordinator = sbp::server::Coordinator::Start(options);
  if (!coordinator.ok()) {
    std::cerr << "sbp-coordinator: " << coordinator.status().message() << "\n";
    return coordinator.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
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
