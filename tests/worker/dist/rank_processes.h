// Runs N ranks as separate processes (fork) and connects them with Gloo over
// loopback through a rendezvous directory, as worker processes would be.
#pragma once

#include <omp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "worker/dist/gloo_communicator.h"

namespace sbp::dist_testing {

// Connects rank `rank` of `world_size` through files under `dir`.
inline absl::StatusOr<std::unique_ptr<Communicator>> ConnectThroughDirectory(
    const std::string& dir, int rank, int world_size, Allocator* scratch = nullptr,
    std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  GlooOptions options;
  options.rank = rank;
  options.world_size = world_size;
  options.timeout = timeout;
  options.scratch_allocator = scratch;
  return sbp::ConnectThroughDirectory(dir, options);
}

// Forks one process per rank running `body(rank)` (its return value is the
// exit code) and waits for all of them; returns the exit codes (-signal for
// a killed process). Children use one compute thread each.
inline std::vector<int> RunRankProcesses(int world_size, const std::function<int(int)>& body) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world_size; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      // As the worker binaries do: a dead peer is an error, not SIGPIPE.
      signal(SIGPIPE, SIG_IGN);
      omp_set_num_threads(1);
      const int code = body(rank);
      fflush(stdout);
      fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
  }
  return codes;
}

}  // namespace sbp::dist_testing
