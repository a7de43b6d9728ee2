#include "common/metrics_http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace sbp {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxRequestBytes = 8192;
// New connections taken per loop turn.
constexpr int kAcceptsPerTurn = 16;
// A connection younger than this is never closed to make room: a client that
// connects has this long to send its request, however many others arrive.
constexpr auto kMinAge = std::chrono::milliseconds(500);
// The loop wakes at least this often to expire deadlines.
constexpr int kTickMillis = 250;

}  // namespace

struct MetricsHttpServer::Connection {
  int fd = -1;
  Clock::time_point opened;
  Clock::time_point deadline;
  std::string in;   // the request head so far
  std::string out;  // the response; empty while reading
  size_t sent = 0;
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, std::shared_ptr<prometheus::Registry> registry) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen '", listen, "': expected host:port"));
  }
  std::string host = listen.substr(0, colon);
  if (host.empty() || host == "*" || host == "[::]") host = "0.0.0.0";
  if (host == "localhost") host = "127.0.0.1";
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen '", listen, "': not an IPv4 address"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(fd, 128) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen ", listen, ": cannot listen (", error, ")"));
  }
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::InternalError(absl::StrCat("pipe: ", error));
  }
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(fd, wake[0], wake[1], ntohs(address.sin_port), std::move(registry)));
}

MetricsHttpServer::MetricsHttpServer(int fd, int wake_read, int wake_write, int port,
                                     std::shared_ptr<prometheus::Registry> registry)
    : fd_(fd),
      wake_read_(wake_read),
      wake_write_(wake_write),
      port_(port),
      registry_(std::move(registry)) {
  thread_ = std::thread([this] { Serve(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  stop_ = true;
  const char byte = 0;
  if (write(wake_write_, &byte, 1) < 0) {
    // The pipe is full, so the loop is awake already.
  }
  if (thread_.joinable()) thread_.join();
  close(fd_);
  close(wake_read_);
  close(wake_write_);
}

std::string MetricsHttpServer::Respond(const std::string& request) const {
  if (!absl::StartsWith(request, "GET /metrics ") && !absl::StartsWith(request, "GET /metrics?") &&
      !absl::StartsWith(request, "GET /metrics\r")) {
    return "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  }
  const std::string body = prometheus::TextSerializer().Serialize(registry_->Collect());
  return absl::StrCat(
      "HTTP/1.1 200 OK\r\n"
      "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
      "Content-Length: ",
      body.size(), "\r\nConnection: close\r\n\r\n", body);
}

void MetricsHttpServer::Serve() {
  std::list<Connection> connections;  // oldest first
  auto close_connection = [&](std::list<Connection>::iterator it) {
    close(it->fd);
    return connections.erase(it);
  };
  // While every slot is taken by connections too young to close, new ones
  // wait in the listen backlog until this time.
  Clock::time_point accept_after = Clock::now();
  std::vector<pollfd> fds;
  std::vector<std::list<Connection>::iterator> polled;
  while (!stop_) {
    // Wait for the nearest deadline at most.
    const Clock::time_point now = Clock::now();
    auto wait = std::chrono::milliseconds(kTickMillis);
    auto until = [&](Clock::time_point t) {
      wait = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(t - now) +
                            std::chrono::milliseconds(1),
                        std::chrono::milliseconds(0), wait);
    };
    for (const Connection& c : connections) until(c.deadline);
    const bool accepting = now >= accept_after;
    if (!accepting) until(accept_after);
    fds.clear();
    polled.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    for (auto it = connections.begin(); it != connections.end(); ++it) {
      fds.push_back({it->fd, static_cast<short>(it->out.empty() ? POLLIN : POLLOUT), 0});
      polled.push_back(it);
    }
    if (poll(fds.data(), fds.size(), static_cast<int>(wait.count())) < 0 && errno != EINTR) break;
    if (stop_) break;

    // Existing connections first: whatever a fresh one sent is answered
    // before new arrivals are taken.
    for (size_t i = 0; i < polled.size(); ++i) {
      const short events = fds[i + 2].revents;
      if (events == 0) continue;
      auto it = polled[i];
      bool done = false;
      if (it->out.empty()) {
        char buffer[2048];
        const ssize_t n = recv(it->fd, buffer, sizeof(buffer), 0);
        if (n > 0) {
          it->in.append(buffer, static_cast<size_t>(n));
          if (it->in.find("\r\n\r\n") != std::string::npos ||
              it->in.find("\n\n") != std::string::npos) {
            it->out = Respond(it->in);
            it->deadline = Clock::now() + std::chrono::milliseconds(kResponseDeadlineMillis);
          } else if (it->in.size() >= kMaxRequestBytes) {
            it->out =
                "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
                "Connection: close\r\n\r\n";
            it->deadline = Clock::now() + std::chrono::milliseconds(kResponseDeadlineMillis);
          }
        } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          done = true;
        }
      }
      if (!done && !it->out.empty()) {
        const ssize_t n =
            send(it->fd, it->out.data() + it->sent, it->out.size() - it->sent, MSG_NOSIGNAL);
        if (n > 0) {
          it->sent += static_cast<size_t>(n);
          done = it->sent == it->out.size();
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          done = true;
        }
      }
      if (!done && (events & (POLLERR | POLLNVAL)) != 0) done = true;
      if (done) close_connection(it);
    }

    // Deadlines.
    const Clock::time_point after = Clock::now();
    for (auto it = connections.begin(); it != connections.end();) {
      it = it->deadline <= after ? close_connection(it) : std::next(it);
    }

    // New connections. Beyond the cap, the oldest connection still sending
    // its request makes room, if it has had kMinAge; else the rest wait.
    if ((fds[1].revents & POLLIN) == 0) continue;
    for (int n = 0; n < kAcceptsPerTurn; ++n) {
      if (static_cast<int>(connections.size()) >= kMaxConnections) {
        auto oldest = std::find_if(connections.begin(), connections.end(),
                                   [](const Connection& c) { return c.out.empty(); });
        if (oldest == connections.end() || oldest->opened + kMinAge > after) {
          accept_after = oldest == connections.end()
                             ? after + std::chrono::milliseconds(kTickMillis)
                             : oldest->opened + kMinAge;
          break;
        }
        close_connection(oldest);
      }
      const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (client < 0) break;
      Connection c;
      c.fd = client;
      c.opened = after;
      c.deadline = after + std::chrono::milliseconds(kRequestDeadlineMillis);
      connections.push_back(std::move(c));
    }
  }
  for (auto it = connections.begin(); it != connections.end();) it = close_connection(it);
}

}  // namespace sbp
