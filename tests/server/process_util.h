// Child processes for tests with real binaries: spawn with output to files,
// signal, wait with a bound; the destructor SIGKILLs whatever still runs.
// Also a plain HTTP GET over a socket and a free loopback port.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/testing/free_port.h"

extern char** environ;

namespace sbp::server::testing {

inline std::string BinaryDir() {
  const char* dir = std::getenv("SBP_BINARY_DIR");
  return std::filesystem::absolute(dir ? dir : "build").string();
}

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ChildProcess {
 public:
  // Runs `argv` with stdout and stderr appended to `log_path`.
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ChildProcess() {
    if (running()) {
      kill(pid_, SIGKILL);
      Wait(absl::Seconds(5));
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool running() const { return pid_ > 0 && !status_.has_value(); }
  pid_t pid() const { return pid_; }
  void Signal(int signal) {
    if (running()) kill(pid_, signal);
  }
  // The wait status once the child ended within `timeout`, else nullopt.
  std::optional<int> Wait(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (running()) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        status_ = status;
        break;
      }
      if (r < 0 || absl::Now() >= deadline) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return status_;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// Waits until `log_path` contains `marker` followed by an address; returns it.
inline std::string WaitForAddress(const std::string& log_path, const std::string& marker,
                                  absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    const std::string text = ReadText(log_path);
    const size_t at = text.rfind(marker);
    if (at != std::string::npos) {
      const size_t start = at + marker.size();
      const size_t end = text.find_first_of(" ,\n", start);
      if (end != std::string::npos) return text.substr(start, end - start);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return "";
}

using ::sbp::testing::FreePort;

// GET http://`host_port``path`; the body, or nullopt on any failure.
inline std::optional<std::string> HttpGet(const std::string& host_port, const std::string& path) {
  const size_t colon = host_port.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(host_port.substr(colon + 1), &port)) {
    return std::nullopt;
  }
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return std::nullopt;
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + host_port + "\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return std::nullopt;
  }
  std::string response;
  char buffer[8192];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || response.find(" 200 ") == std::string::npos ||
      body == std::string::npos) {
    return std::nullopt;
  }
  return response.substr(body + 4);
}

}  // namespace sbp::server::testing
