#include "server/coordinator.h"

#include <arpa/inet.h>
#include <grpc/grpc.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <exception>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "common/metrics_http_server.h"
#include "common/status_macros.h"
#include "server/auth.h"
#include "server/identity.h"
#include "server/job_manager.h"
#include "server/job_service.h"
#include "server/metrics.h"
#include "server/reflection_service.h"
#include "server/rendezvous.h"
#include "server/rendezvous_service.h"
#include "server/rpc_guard.h"
#include "server/standby_poller.h"
#include "server/store.h"
#include "server/watch_hub.h"
#include "server/worker_service.h"

namespace sbp::server {
namespace {

constexpr absl::Duration kTickInterval = absl::Milliseconds(250);
constexpr absl::Duration kShutdownGrace = absl::Seconds(3);

// Splits "host:port" (host may be "[v6]"); InvalidArgument naming `flag`.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address,
                                                          absl::string_view flag) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": must be HOST:PORT such as 127.0.0.1:7700 (got \"", address, "\")"));
  }
  return std::make_pair(address.substr(0, colon), port);
}

// A host clients on this machine can dial: wildcards become loopback.
std::string DialableHost(const std::string& host) {
  if (host == "0.0.0.0" || host == "[::]" || host == "*") return "127.0.0.1";
  return host;
}

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

namespace {

// True for 127.0.0.0/8, ::1 and localhost listen addresses ("host:port").
absl::StatusOr<bool> IsLoopbackListen(const std::string& listen) {
  absl::StatusOr<std::pair<std::string, int>> host_port = SplitHostPort(listen, "listen");
  if (!host_port.ok()) return host_port.status();
  std::string host = host_port->first;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost";
}

// The identities for `options`, and the rule that nothing listens open on a
// non-loopback address unless asked to.
absl::StatusOr<std::shared_ptr<IdentityDirectory>> OpenIdentities(
    const CoordinatorOptions& options) {
  if (!options.users_path.empty() &&
      (!options.client_token.empty() || !options.worker_token.empty())) {
    return absl::InvalidArgumentError(
        "--users replaces --client-token-file and --worker-token-file; give one or the other");
  }
  if (!options.client_token.empty() && options.client_token == options.worker_token) {
    return absl::InvalidArgumentError(
        "the client and worker tokens are the same: either role could call anything");
  }
  std::shared_ptr<IdentityDirectory> identities;
  if (!options.users_path.empty()) {
    ASSIGN_OR_RETURN(IdentityTable table, LoadIdentityFile(options.users_path));
    identities = std::make_shared<IdentityDirectory>(std::move(table), options.users_path);
  } else {
    identities = std::make_shared<IdentityDirectory>(
        IdentityTable::FromTokens(options.client_token, options.worker_token));
  }
  std::vector<std::string> open;
  if (!identities->HasRole(IdentityRole::kUser)) open.push_back("clients (JobService)");
  if (!identities->HasRole(IdentityRole::kWorker)) {
    open.push_back("workers (WorkerService, RendezvousService)");
  }
  if (open.empty()) return identities;
  const std::string what = absl::StrCat("no tokens for ", absl::StrJoin(open, " and "));
  ASSIGN_OR_RETURN(const bool loopback, IsLoopbackListen(options.listen));
  if (!loopback && !options.insecure) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": refusing to listen open on ", options.listen,
                     "; give --users (or token files), listen on 127.0.0.1, or pass --insecure"));
  }
  LOG(WARNING) << what << ": those calls are accepted without authentication"
               << (options.insecure ? " (--insecure)" : " (loopback only)");
  return identities;
}

}  // namespace

struct Coordinator::Impl {
  CoordinatorOptions options;
  std::unique_ptr<Store> store;
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<MetricsHttpServer> metrics_server;
  std::unique_ptr<WatchHub> hub;
  std::unique_ptr<RendezvousStore> rendezvous;
  std::unique_ptr<JobManager> manager;
  std::shared_ptr<IdentityDirectory> identities;
  std::unique_ptr<Authenticator> auth;
  std::unique_ptr<RpcGuard> guard;
  std::unique_ptr<JobServiceImpl> job_service;
  std::unique_ptr<WorkerServiceImpl> worker_service;
  std::unique_ptr<RendezvousServiceImpl> rendezvous_service;
  std::unique_ptr<ReflectionServices> reflection;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<StandbyPoller> standby_poller;  // see standby_poller.h
  std::string address;
  std::string metrics_address;
  absl::Notification stop_monitor;
  std::thread monitor;
  absl::Mutex shutdown_mu;
  bool shut_down = false;

  absl::Status StartMetrics();
  absl::Status StartServer();
  void Shutdown();
};

absl::Status Coordinator::Impl::StartMetrics() {
  metrics = std::make_unique<Metrics>();
  if (options.metrics_listen.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto host_port, SplitHostPort(options.metrics_listen, "metrics_listen"));
  // One poll(2) loop: slow or stalled clients never hold up a scrape.
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> started =
      MetricsHttpServer::Start(options.metrics_listen, metrics->registry());
  if (!started.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", options.metrics_listen,
                                               ": ", started.status().message()));
  }
  metrics_server = *std::move(started);
  metrics_address = absl::StrCat(DialableHost(host_port.first), ":", metrics_server->port());
  return absl::OkStatus();
}

absl::Status Coordinator::Impl::StartServer() {
  ASSIGN_OR_RETURN(auto host_port, SplitHostPort(options.listen, "listen"));
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options.tls_cert_path.empty()) {
    // Read once so that a missing or unreadable file is an error now; then
    // gRPC watches the files and serves a rotated certificate (cert-manager
    // renews it in place) without a restart.
    ASSIGN_OR_RETURN(std::string cert, ReadFile(options.tls_cert_path, "TLS certificate"));
    ASSIGN_OR_RETURN(std::string key, ReadFile(options.tls_key_path, "TLS key"));
    auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        options.tls_key_path, options.tls_cert_path,
        static_cast<unsigned int>(options.tls_refresh_seconds));
    grpc::experimental::TlsServerCredentialsOptions tls(provider);
    tls.watch_identity_key_cert_pairs();
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    credentials = grpc::experimental::TlsServerCredentials(tls);
  }
  // grpc.health.v1 is gRPC's own callback service (no thread per Watch).
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, credentials, &port);
  // The sync handler threads of all unary calls; RpcGuard's lanes keep part
  // of them for the workers (see rpc_guard.h). Streams are callback handlers
  // and take none.
  grpc::ResourceQuota quota("sbp-coordinator");
  quota.SetMaxThreads(guard->limits().max_threads);
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_streams_per_connection);
  builder.RegisterService(job_service.get());
  builder.RegisterService(worker_service.get());
  builder.RegisterService(rendezvous_service.get());
  reflection = std::make_unique<ReflectionServices>(
      guard.get(), std::vector<std::string>{
                       streambp::v1::JobService::service_full_name(),
                       streambp::v1::WorkerService::service_full_name(),
                       streambp::v1::RendezvousService::service_full_name(),
                       "grpc.health.v1.Health",
                   });
  for (grpc::Service* service : reflection->services()) builder.RegisterService(service);
  server = builder.BuildAndStart();
  standby_poller = std::make_unique<StandbyPoller>();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen,
                     " (address in use, not a local address, or a bad TLS certificate/key)"));
  }
  address = absl::StrCat(DialableHost(host_port.first), ":", port);
  return absl::OkStatus();
}

void Coordinator::Impl::Shutdown() {
  {
    absl::MutexLock lock(&shutdown_mu);
    if (shut_down) return;
    shut_down = true;
  }
  if (monitor.joinable()) {
    stop_monitor.Notify();
    monitor.join();
  }
  // End every long-poll and watch first so that in-flight calls return.
  if (manager) manager->Shutdown();
  if (hub) hub->Shutdown();
  if (rendezvous) rendezvous->Shutdown();
  if (server) {
    if (auto* health = server->GetHealthCheckService()) health->SetServingStatus(false);
    server->Shutdown(absl::ToChronoTime(absl::Now() + kShutdownGrace));
    server->Wait();
  }
  standby_poller.reset();
  metrics_server.reset();
  LOG(INFO) << "coordinator stopped";
}

Coordinator::Coordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Coordinator::~Coordinator() { Shutdown(); }

void Coordinator::Shutdown() { impl_->Shutdown(); }

std::string Coordinator::address() const { return impl_->address; }

std::string Coordinator::metrics_address() const { return impl_->metrics_address; }

std::shared_ptr<prometheus::Registry> Coordinator::metrics_registry() const {
  return impl_->metrics->registry();
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& options) {
  if (options.db_path.empty()) {
    return absl::InvalidArgumentError("db: the SQLite database path is required");
  }
  if (options.tls_cert_path.empty() != options.tls_key_path.empty()) {
    return absl::InvalidArgumentError("tls: give both the certificate and the key, or neither");
  }
  if (options.lease_seconds < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease_seconds: must be at least 1 (got ", options.lease_seconds, ")"));
  }
  if (options.stall_seconds < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("stall_seconds: must be at least 1 (got ", options.stall_seconds, ")"));
  }
  if (options.preemption_grace_seconds < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("preemption_grace_seconds: must be at least 1 (got ",
                     options.preemption_grace_seconds, ")"));
  }
  if (options.max_streams_per_connection < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_streams_per_connection: must be at least 1 (got ",
                     options.max_streams_per_connection, ")"));
  }
  if (options.max_message_bytes < 64 * 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes: must be at least 65536 (got ", options.max_message_bytes, ")"));
  }
  ASSIGN_OR_RETURN(RpcLimits limits, options.limits.Resolved());
  RETURN_IF_ERROR(CheckOutputCaps(options.metrics_caps, OutputKind::kMetrics));
  RETURN_IF_ERROR(CheckOutputCaps(options.log_caps, OutputKind::kLogs));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  ASSIGN_OR_RETURN(impl->identities, OpenIdentities(options));
  ASSIGN_OR_RETURN(impl->store, Store::Open(options.db_path));
  RETURN_IF_ERROR(impl->StartMetrics());
  impl->hub = std::make_unique<WatchHub>();
  impl->rendezvous = std::make_unique<RendezvousStore>();
  JobManagerOptions manager_options;
  manager_options.lease = absl::Seconds(options.lease_seconds);
  manager_options.stall = absl::Seconds(options.stall_seconds);
  manager_options.preemption_grace = absl::Seconds(options.preemption_grace_seconds);
  manager_options.work_dir = options.work_dir;
  manager_options.confine_paths = options.confine_paths;
  manager_options.identities = impl->identities;
  manager_options.shared_dir = options.shared_dir;
  manager_options.user_areas = !options.users_path.empty();
  manager_options.retain_finished = options.retain_finished;
  manager_options.max_finished_per_user = options.max_finished_per_user;
  manager_options.retention_interval = options.retention_interval;
  manager_options.max_spec_bytes_per_user = options.max_spec_bytes_per_user;
  manager_options.metrics_caps = options.metrics_caps;
  manager_options.log_caps = options.log_caps;
  ASSIGN_OR_RETURN(impl->manager,
                   JobManager::Create(impl->store.get(), impl->metrics.get(), impl->hub.get(),
                                      impl->rendezvous.get(), manager_options));
  impl->auth = std::make_unique<Authenticator>(impl->identities);
  impl->guard = std::make_unique<RpcGuard>(impl->auth.get(), impl->metrics.get(), limits);
  impl->job_service =
      std::make_unique<JobServiceImpl>(impl->manager.get(), impl->hub.get(), impl->guard.get());
  impl->worker_service =
      std::make_unique<WorkerServiceImpl>(impl->manager.get(), impl->guard.get());
  impl->rendezvous_service = std::make_unique<RendezvousServiceImpl>(
      impl->manager.get(), impl->rendezvous.get(), impl->guard.get());
  RETURN_IF_ERROR(impl->StartServer());
  Impl* raw = impl.get();
  impl->monitor = std::thread([raw] {
    while (!raw->stop_monitor.WaitForNotificationWithTimeout(kTickInterval)) {
      raw->manager->Tick();
      // A token removed from the users file stops working within a tick.
      if (absl::Status s = raw->identities->ReloadIfChanged(); !s.ok()) {
        LOG(ERROR) << "users file not reloaded (the previous identities stay in force): " << s;
      }
    }
  });
  LOG(INFO) << "coordinator serving gRPC on " << impl->address
            << (options.tls_cert_path.empty() ? "" : " (TLS)") << ", database " << options.db_path;
  if (!impl->metrics_address.empty()) {
    LOG(INFO) << "coordinator serving metrics on http://" << impl->metrics_address << "/metrics";
  }
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(impl)));
}

absl::Status Coordinator::ReloadIdentities() {
  const absl::Status status = impl_->identities->Reload();
  if (status.ok()) LOG(INFO) << "users file reloaded";
  return status;
}

}  // namespace sbp::server
