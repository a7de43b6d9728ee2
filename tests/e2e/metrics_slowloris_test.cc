// The worker's and the coordinator's /metrics under a slowloris: connections
// (300 to the worker, more than it keeps open; 50 to the coordinator) that
// each send one byte of a request every second and never finish it (and come
// back when dropped). Throughout, a scrape, by `curl` and by a plain socket
// GET, is answered within 5 s, and the servers go on serving.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kSlowClients = 300;
constexpr auto kAttack = seconds(12);

// A loopback connection whose connect, sends and receives give up after
// `timeout`; -1 when it cannot connect.
int Connect(int port, std::chrono::milliseconds timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// GET /metrics with a 5 s budget for the whole exchange; the response, or ""
// when it did not come in time.
std::string TimedScrape(int port) {
  const auto deadline = Clock::now() + seconds(5);
  const int fd = Connect(port, milliseconds(5000));
  if (fd < 0) return "";
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  std::string out;
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    while (Clock::now() < deadline) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      out.append(buffer, static_cast<size_t>(n));
    }
  }
  close(fd);
  return Clock::now() < deadline ? out : "";
}

// For kAttack: `clients` slow clients each send one byte a second of a
// request head that never ends (a connection the server closed is opened
// again), while a scrape (a plain socket GET and, where installed, curl)
// runs every half second and must be answered within 5 s with `metric` in
// it. Prints the figures as one JSON line.
void ScrapeUnderSlowClients(int port, int clients, const std::string& metric,
                            const std::filesystem::path& dir, const char* server) {
  const bool have_curl = std::system("command -v curl >/dev/null 2>&1") == 0;
  std::atomic<bool> stop{false};
  std::atomic<int> reconnects{0};
  std::thread attacker([&] {
    const std::string head = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    std::vector<int> fds(clients, -1);
    std::vector<size_t> sent(clients, 0);
    while (!stop) {
      for (int i = 0; i < clients && !stop; ++i) {
        if (fds[i] < 0) {
          fds[i] = Connect(port, milliseconds(1000));
          sent[i] = 0;
          if (fds[i] >= 0 && i > 0) reconnects++;
        }
        if (fds[i] < 0) continue;
        const char byte = sent[i] < head.size() ? head[sent[i]] : 'a';
        if (send(fds[i], &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
          close(fds[i]);
          fds[i] = -1;
          continue;
        }
        ++sent[i];
      }
      std::this_thread::sleep_for(seconds(1));
    }
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  });

  std::this_thread::sleep_for(seconds(2));  // every slow client is connected
  int scrapes = 0;
  Clock::duration slowest{};
  const auto end = Clock::now() + kAttack;
  while (Clock::now() < end) {
    auto start = Clock::now();
    const std::string response = TimedScrape(port);
    Clock::duration took = Clock::now() - start;
    EXPECT_NE(response.find("HTTP/1.1 200 OK"), std::string::npos)
        << server << ": no answer within 5 s: '" << response.substr(0, 200) << "'";
    EXPECT_NE(response.find(metric), std::string::npos) << server;
    slowest = std::max(slowest, took);
    if (have_curl) {
      start = Clock::now();
      const CommandResult curl = RunCommand(
          absl::StrCat("curl -sS -m 5 -o /dev/null -w '%{http_code}' http://127.0.0.1:", port,
                       "/metrics"),
          dir);
      took = Clock::now() - start;
      EXPECT_EQ(curl.exit_code, 0) << server << ": " << curl.err;
      EXPECT_EQ(curl.out, "200") << server;
      slowest = std::max(slowest, took);
    }
    ++scrapes;
    std::this_thread::sleep_for(milliseconds(500));
  }
  stop = true;
  attacker.join();
  std::printf(
      "{\"server\": \"%s\", \"slow_clients\": %d, \"scrapes\": %d, "
      "\"slowest_scrape_seconds\": %.3f, \"slow_client_reconnects\": %d, \"curl\": %s}\n",
      server, clients, scrapes, std::chrono::duration<double>(slowest).count(), reconnects.load(),
      have_curl ? "true" : "false");
  EXPECT_LT(slowest, seconds(5)) << server;
  EXPECT_GE(scrapes, 5) << server;
}

TEST(MetricsSlowlorisTest, ScrapesAreAnsweredWhileSlowClientsDribble) {
  Cluster c("metrics_slowloris");
  c.StartCoordinator();
  const int port = FreePort();
  c.StartWorker("w1", {absl::StrCat("--metrics-listen=127.0.0.1:", port)});
  ASSERT_TRUE(WaitFor(
      [&] {
        return HttpGet(port, "/metrics").find("sbp_worker_memory_capacity_bytes") !=
               std::string::npos;
      },
      seconds(20)))
      << c.Logs();
  ScrapeUnderSlowClients(port, kSlowClients, "sbp_worker_memory_capacity_bytes", c.dir(), "worker");

  // The worker stayed registered and alive.
  const CommandResult workers = c.Sbp("workers -o json");
  const auto j = nlohmann::json::parse(workers.out, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("workers") && j["workers"].size() == 1) << workers.out;
  EXPECT_EQ(j["workers"][0].value("state", ""), "idle");
  EXPECT_TRUE(c.worker("w1").running());
}

// The coordinator's /metrics the same way, with 50 slow clients: before, two
// half-sent requests held its two handler threads and no scrape was
// answered for about 30 s.
TEST(MetricsSlowlorisTest, CoordinatorScrapesAreAnsweredWhileSlowClientsDribble) {
  Cluster c("metrics_slowloris_coordinator");
  const int port = FreePort();
  c.StartCoordinator(3, {"--metrics-listen", absl::StrCat("127.0.0.1:", port)});
  ASSERT_TRUE(
      WaitFor([&] { return HttpGet(port, "/metrics").find("sbp_workers") != std::string::npos; },
              seconds(20)))
      << c.Logs();
  ScrapeUnderSlowClients(port, 50, "sbp_workers", c.dir(), "coordinator");
  EXPECT_EQ(c.Sbp("list").exit_code, 0) << c.Logs();
}

}  // namespace
}  // namespace sbp::testing
