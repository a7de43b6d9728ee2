// A minimal HTTP endpoint that serves one prometheus-cpp Registry at
// /metrics (text format 0.0.4). The worker and the coordinator use it instead
// of prometheus-cpp's civetweb Exposer, whose 100 KiB handler threads
// overflowed their stacks inside the worker process (seen with Debian 12's
// civetweb 1.15) and whose few handler threads two half-sent requests could
// hold for 30 s each, so that no scrape was answered.
//
// One thread runs a poll(2) loop over non-blocking sockets, so no connection
// can hold up another: a client that sends its request a byte at a time (a
// slowloris) or never reads the answer only occupies a slot until its
// deadline (kRequestDeadline to send the request, kResponseDeadline to take
// the answer). At most kMaxConnections are open; a new connection beyond that
// closes the oldest one still sending its request once that one has had half
// a second, so a scrape or a liveness probe is answered within about a second
// even while slow clients keep every slot busy.
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
  static constexpr int kMaxConnections = 256;
  static constexpr int kRequestDeadlineMillis = 3000;
  static constexpr int kResponseDeadlineMillis = 5000;

  // `listen` is "host:port" (IPv4; port 0 picks a free one).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, std::shared_ptr<prometheus::Registry> registry);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  struct Connection;
  MetricsHttpServer(int fd, int wake_read, int wake_write, int port,
                    std::shared_ptr<prometheus::Registry> registry);
  void Serve();
  // The whole response for a complete request head.
  std::string Respond(const std::string& request) const;

  int fd_;
  int wake_read_, wake_write_;  // a pipe: the destructor wakes the loop
  int port_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace sbp
