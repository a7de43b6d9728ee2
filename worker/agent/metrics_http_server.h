// A minimal HTTP endpoint that serves one prometheus-cpp Registry at
// /metrics (text format 0.0.4), one connection at a time on its own thread.
// The worker uses it instead of prometheus-cpp's civetweb Exposer, whose
// 100 KiB handler threads overflowed their stacks inside the worker process
// (seen with Debian 12's civetweb 1.15); a scrape is small and infrequent, so
// a single blocking loop is enough.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"

namespace sbp {

class MetricsHttpServer {
 public:
  // `listen` is "host:port" (IPv4; port 0 picks a free one).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, std::shared_ptr<prometheus::Registry> registry);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer(int fd, int port, std::shared_ptr<prometheus::Registry> registry);
  void Serve();
  void Answer(int client);

  int fd_;
  int port_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace sbp
