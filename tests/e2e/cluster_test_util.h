// A real cluster on loopback for end-to-end tests: sbp-coordinator and
// sbp-worker processes (fork/exec, free ports, token files, a scratch
// directory holding a tiny model and data), the `sbp` CLI pointed at them,
// bounded waits, and every child killed when the test ends (or dies).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/cli_test_util.h"
#include "tests/testing/free_port.h"

namespace sbp::testing {

// GET http://127.0.0.1:port/path over a plain socket (HTTP/1.0); "" when
// nothing answers.
inline std::string HttpGet(int port, const std::string& path) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  std::string out;
  if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

// Polls `condition` every 100 ms until it holds (true) or `timeout` passes.
inline bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return condition();
}

// One child process; SIGKILLed and reaped on destruction. Its stdout and
// stderr go to `log`.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
          const std::filesystem::path& log, const std::map<std::string, std::string>& env = {}) {
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
      if (chdir(cwd.c_str()) != 0) _exit(127);
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      const int null = open("/dev/null", O_RDONLY);
      dup2(null, STDIN_FILENO);
      for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Process() { Kill(SIGKILL); }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  bool running() {
    if (exited_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_status_ = status;
    }
    return !exited_;
  }
  // Sends `signal` and waits for the exit (SIGKILL after 10 s).
  void Kill(int signal) {
    if (pid_ <= 0 || exited_) return;
    kill(pid_, signal);
    if (!WaitFor([this] { return !running(); }, std::chrono::seconds(10))) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &exit_status_, 0);
      exited_ = true;
    }
  }
  // The exit code, -1 while running or after a signal.
  int exit_code() {
    running();
    return exited_ && WIFEXITED(exit_status_) ? WEXITSTATUS(exit_status_) : -1;
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_status_ = 0;
};

// The scratch directory with a tiny model, data and tokens, plus the processes.
class Cluster {
 public:
  explicit Cluster(const std::string& name) : dir_(FreshDir(name)) {
    port_ = FreePort();
    WriteFile(dir_ / "client.token", "client-secret\n");
    WriteFile(dir_ / "worker.token", "worker-secret\n");
    std::string data;
    for (int i = 0; i < 24; ++i) {
      const int a = 16 + i % 8, b = 16 + (i * 3) % 8, c = 16 + (i * 5) % 8;
      absl::StrAppend(&data, "{\"prompt_ids\": [1, ", a, ", ", b, ", ", c,
                      ", 2], \"completion_ids\": [", c, ", ", b, ", ", a, ", 3]}\n");
    }
    WriteFile(dir_ / "data.jsonl", data);
    const CommandResult init =
        RunCommand(SbpBinary() + " model init --preset tiny-qwen3 --seed 1 --out model", dir_);
    EXPECT_EQ(init.exit_code, 0) << init.err;
  }

  const std::filesystem::path& dir() const { return dir_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  // A job spec over the tiny model; `steps` steps of `sequences` sequences.
  std::string Spec(const std::string& name, int steps, int sequences, int every_steps,
                   const std::string& extra = "") const {
    return absl::StrCat("name: ", name,
                        "\nmodel: model\ndata: data.jsonl\nobjective: sft\nseq_len: 16\n"
                        "streambp: {mode: stream, chunk_tokens: 4, logits_chunk_tokens: 4}\n"
                        "train: {steps: ",
                        steps, ", sequences_per_step: ", sequences,
                        ", lr: 1.0e-2}\ncheckpoint: {every_steps: ", every_steps, ", dir: runs/",
                        name, "}\nmax_restarts: 2\n", extra);
  }
  std::string WriteSpec(const std::string& name, const std::string& text) const {
    const std::string file = name + ".yaml";
    WriteFile(dir_ / file, text);
    return file;
  }

  // `extra`: more sbp-coordinator flags (--metrics-listen, --tls-cert, ...).
  void StartCoordinator(int lease_seconds = 3, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {BinaryDir() + "/bin/sbp-coordinator"};
    Append(argv, {"--listen", address(), "--db", (dir_ / "coordinator.db").string()});
    Append(argv, {"--client-token-file", (dir_ / "client.token").string()});
    Append(argv, {"--worker-token-file", (dir_ / "worker.token").string()});
    Append(argv, {"--lease-seconds", std::to_string(lease_seconds)});
    Append(argv, extra);
    coordinator_ = std::make_unique<Process>(argv, dir_, dir_ / "coordinator.log");
    // Ready once the CLI gets an answer.
    EXPECT_TRUE(WaitFor([this] { return Sbp("list").exit_code == 0; }, std::chrono::seconds(20)))
        << ReadAll((dir_ / "coordinator.log").string());
  }
  Process& coordinator() { return *coordinator_; }
  void KillCoordinator(int signal) { coordinator_->Kill(signal); }

  // Starts worker `name` (1 compute thread so that workers share 2 cores);
  // `extra`: more sbp-worker flags (2 GiB of memory unless they set --memory).
  Process& StartWorker(const std::string& name, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {BinaryDir() + "/bin/sbp-worker"};
    Append(argv, {"--coordinator", address(), "--token-file", (dir_ / "worker.token").string()});
    if (std::find(extra.begin(), extra.end(), "--memory") == extra.end()) {
      Append(argv, {"--memory", "2GiB"});
    }
    Append(argv, {"--work-dir", dir_.string(), "--name", name});
    Append(argv, extra);
    workers_[name] =
        std::make_unique<Process>(argv, dir_, dir_ / (name + ".log"),
                                  std::map<std::string, std::string>{{"OMP_NUM_THREADS", "1"}});
    return *workers_[name];
  }
  Process& worker(const std::string& name) { return *workers_.at(name); }

  // Global flags every `sbp` call gets (e.g. " --tls-ca ca.pem").
  void set_cli_flags(const std::string& flags) { cli_flags_ = flags; }

  // `sbp --coordinator ADDR --token-file client.token ARGS` in the scratch dir.
  CommandResult Sbp(const std::string& args, const std::string& token_file = "client.token") const {
    std::string command = SbpBinary() + " --coordinator " + address() + cli_flags_;
    if (!token_file.empty()) command += " --token-file " + token_file;
    return RunCommand(command + " " + args, dir_);
  }

  // `sbp get ID -o json`, parsed; null when the call failed.
  nlohmann::json GetJob(const std::string& id) const {
    const CommandResult r = Sbp("get " + id + " -o json");
    if (r.exit_code != 0) return nullptr;
    return nlohmann::json::parse(r.out, nullptr, false);
  }
  // The names of the workers running job `id`'s ranks, in rank order.
  std::vector<std::string> RankWorkerNames(const std::string& id) const {
    const nlohmann::json job = GetJob(id);
    const auto workers = nlohmann::json::parse(Sbp("workers -o json").out, nullptr, false);
    std::vector<std::string> names;
    if (!job.is_object() || !job.contains("worker_ids") || !workers.is_object()) return names;
    for (const auto& worker_id : job["worker_ids"]) {
      for (const auto& w : workers["workers"]) {
        if (w["id"] == worker_id) names.push_back(w["name"]);
      }
    }
    return names;
  }
  static int64_t Int(const nlohmann::json& j) {  // proto3 JSON writes int64 as strings
    return j.is_string() ? std::stoll(j.get<std::string>()) : j.get<int64_t>();
  }
  std::string State(const std::string& id) const {
    const nlohmann::json job = GetJob(id);
    return job.is_object() ? job.value("state", "") : "";
  }
  int64_t Step(const std::string& id) const {
    const nlohmann::json job = GetJob(id);
    if (!job.is_object() || !job.contains("progress")) return -1;
    return Int(job["progress"]["step"]);
  }
  // Submits `spec_file` and returns the job id ("" on failure).
  std::string Submit(const std::string& spec_file, const std::string& extra = "") const {
    const CommandResult r = Sbp("submit " + spec_file + " -o json " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json job = nlohmann::json::parse(r.out, nullptr, false);
    return job.is_object() ? job.value("id", "") : "";
  }
  std::string Logs() const {
    std::string out = "--- coordinator.log\n" + ReadAll((dir_ / "coordinator.log").string());
    for (const auto& [name, process] : workers_) {
      out += "--- " + name + ".log\n" + ReadAll((dir_ / (name + ".log")).string());
    }
    return out;
  }

 private:
  static void Append(std::vector<std::string>& argv, const std::vector<std::string>& more) {
    argv.insert(argv.end(), more.begin(), more.end());
  }

  std::filesystem::path dir_;
  int port_ = 0;
  std::string cli_flags_;
  std::unique_ptr<Process> coordinator_;
  std::map<std::string, std::unique_ptr<Process>> workers_;
};

// After a rank of job `id` was killed: the job still succeeds, on a later
// attempt, at step `steps`, resuming from a checkpoint (a multiple of
// `every` above 0), not from scratch.
inline void ExpectRetryResumesAndCompletes(Cluster& c, const std::string& id, int64_t steps,
                                           int64_t every) {
  const CommandResult watch = c.Sbp("watch " + id);
  EXPECT_EQ(watch.exit_code, 0) << watch.err << c.Logs();
  const nlohmann::json final_job = c.GetJob(id);
  EXPECT_EQ(final_job["state"], "SUCCEEDED") << final_job.dump(1) << c.Logs();
  EXPECT_GE(final_job["attempt"], 2);
  EXPECT_EQ(Cluster::Int(final_job["progress"]["step"]), steps);
  const std::string events = c.Sbp("events " + id).out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(events, m, std::regex("resuming after step (\\d+)"))) << events;
  EXPECT_EQ(std::stoll(m[1]) % every, 0);
  EXPECT_GT(std::stoll(m[1]), 0) << "the retry starts from a checkpoint, not from scratch";
}

}  // namespace sbp::testing
