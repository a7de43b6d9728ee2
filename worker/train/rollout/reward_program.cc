#include "worker/train/rollout/reward_program.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace sbp {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxStdoutBytes = size_t{64} << 20;
constexpr size_t kMaxStderrLineBytes = 4096;
constexpr size_t kStderrTailLines = 5;
constexpr size_t kIoChunk = size_t{64} << 10;
// Bytes read from one pipe per wake-up, so that a program flooding a pipe
// cannot keep the loop from checking its deadline.
constexpr size_t kMaxReadPerWake = size_t{1} << 20;
// The longest wait between checks whether the program has exited (it may
// have left a process behind that keeps its pipes open).
constexpr int kExitCheckMs = 100;
// Longer limits are treated as this one (keeps the deadline representable).
constexpr double kMaxTimeoutS = 30.0 * 24 * 3600;

std::string ErrnoText(int error) { return std::strerror(error); }

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// A close-on-exec pipe whose ends are not 0, 1 or 2 (so that dup2 onto the
// child's standard streams always makes a new descriptor).
absl::Status MakePipe(Fd* read_end, Fd* write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", ErrnoText(errno)));
  }
  Fd ends[2] = {Fd(fds[0]), Fd(fds[1])};
  for (Fd& end : ends) {
    if (end.get() > 2) continue;
    const int moved = ::fcntl(end.get(), F_DUPFD_CLOEXEC, 3);
    if (moved < 0) return absl::InternalError(absl::StrCat("fcntl: ", ErrnoText(errno)));
    end = Fd(moved);
  }
  *read_end = std::move(ends[0]);
  *write_end = std::move(ends[1]);
  return absl::OkStatus();
}

absl::Status SetNonBlocking(const Fd& fd) {
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) < 0) {
    return absl::InternalError(absl::StrCat("fcntl: ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

// Blocks SIGPIPE in this thread while alive, so that writing to a program
// that stopped reading gives EPIPE instead of killing the trainer; a SIGPIPE
// raised meanwhile is consumed before the old mask comes back.
class SigpipeBlocker {
 public:
  SigpipeBlocker() {
    sigemptyset(&pipe_set_);
    sigaddset(&pipe_set_, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_set_, &old_mask_);
    was_pending_ = Pending();
  }
  SigpipeBlocker(const SigpipeBlocker&) = delete;
  SigpipeBlocker& operator=(const SigpipeBlocker&) = delete;
  ~SigpipeBlocker() {
    if (!was_pending_ && Pending()) {
      const timespec zero = {0, 0};
      while (::sigtimedwait(&pipe_set_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }

 private:
  static bool Pending() {
    sigset_t pending;
    sigemptyset(&pending);
    return ::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  }

  sigset_t pipe_set_;
  sigset_t old_mask_;
  bool was_pending_ = false;
};

// The running program. The destructor kills its process group and reaps it
// unless Reap() has.
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) {
      KillGroup();
      Reap();
    }
  }

  void set_pid(pid_t pid) { pid_ = pid; }

  // Whether the program has exited (not reaped yet, so its process group
  // id cannot be reused before KillGroup).
  bool Exited() {
    if (pid_ <= 0 || lost_) return true;
    siginfo_t info;
    std::memset(&info, 0, sizeof(info));
    if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == EINTR) return false;
      lost_ = true;  // reaped elsewhere (SIGCHLD ignored, or a reaper thread)
      return true;
    }
    return info.si_pid == pid_;
  }

  void KillGroup() {
    if (pid_ > 0 && !lost_) ::kill(-pid_, SIGKILL);
  }

  // Waits for the program; its wait status, or -1 when it is not known.
  int Reap() {
    if (pid_ <= 0) return status_;
    int status = 0;
    pid_t got;
    while ((got = ::waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    status_ = got > 0 ? status : -1;
    return status_;
  }

  Fd stdin_fd, stdout_fd, stderr_fd;

 private:
  pid_t pid_ = -1;
  bool lost_ = false;
  int status_ = -1;
};

// Splits stderr into lines for the context's callback and keeps the last
// few for error messages.
class StderrLines {
 public:
  explicit StderrLines(const std::function<void(const std::string&)>& sink) : sink_(sink) {}

  void Feed(absl::string_view data) {
    while (!data.empty()) {
      const size_t newline = data.find('\n');
      const absl::string_view part = data.substr(0, newline);
      const size_t room = kMaxStderrLineBytes - std::min(kMaxStderrLineBytes, line_.size());
      line_.append(part.data(), std::min(room, part.size()));
      if (part.size() > room) truncated_ = true;
      if (newline == absl::string_view::npos) return;
      Emit();
      data.remove_prefix(newline + 1);
    }
  }

  void Finish() {
    if (!line_.empty() || truncated_) Emit();
  }

  std::string Tail() const {
    if (tail_.empty()) return "";
    return absl::StrCat("; its last stderr lines: ", absl::StrJoin(tail_, " | "));
  }

 private:
  void Emit() {
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (truncated_) line_ += " [truncated]";
    if (sink_) sink_(line_);
    tail_.push_back(std::move(line_));
    if (tail_.size() > kStderrTailLines) tail_.pop_front();
    line_.clear();
    truncated_ = false;
  }

  const std::function<void(const std::string&)>& sink_;
  std::string line_;
  bool truncated_ = false;
  std::deque<std::string> tail_;
};

// Reads what `fd` has now (at most kMaxReadPerWake bytes) into `consume`,
// which returns false to stop; resets `fd` at end of file or on an error.
// Whether it stopped at kMaxReadPerWake with more possibly waiting.
template <typename Consume>
bool ReadAvailable(Fd& fd, Consume consume) {
  char buffer[kIoChunk];
  size_t total = 0;
  while (fd.valid()) {
    if (total >= kMaxReadPerWake) return true;
    const ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n > 0) {
      total += static_cast<size_t>(n);
      if (!consume(absl::string_view(buffer, static_cast<size_t>(n)))) return false;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return false;
    } else {
      fd.Reset();  // end of file, or an error that will not go away
    }
  }
  return false;
}

std::string JsonText(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The program's stdin: one JSON line per input.
absl::StatusOr<std::string> EncodeInputs(const std::vector<RewardInput>& inputs) {
  std::string out;
  try {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const RewardInput& input = inputs[i];
      absl::StrAppend(&out, "{\"index\":", i, ",\"prompt_ids\":", JsonText(input.prompt_ids),
                      ",\"completion_ids\":", JsonText(input.completion_ids),
                      ",\"prompt\":", JsonText(input.prompt_text),
                      ",\"completion\":", JsonText(input.completion_text),
                      ",\"truncated\":", input.truncated ? "true" : "false",
                      ",\"fields\":", JsonText(input.fields), "}\n");
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("encoding the reward program's input: ", e.what()));
  }
  return out;
}

// A line of output as it appears in an error message.
std::string Quoted(absl::string_view line) {
  constexpr size_t kMaxShown = 80;
  std::string shown = absl::CHexEscape(line.substr(0, kMaxShown));
  if (line.size() > kMaxShown) shown += "...";
  return absl::StrCat("\"", shown, "\"");
}

class RewardProgram : public RewardFunction {
 public:
  RewardProgram(std::vector<std::string> command, double timeout_s, RewardContext context)
      : command_(std::move(command)),
        timeout_s_(timeout_s),
        context_(std::move(context)),
        name_(absl::StrCat("reward program '", command_[0], "'")) {}

  absl::StatusOr<std::vector<double>> Score(const std::vector<RewardInput>& inputs) override;

 private:
  absl::Status Spawn(Child* child) const;
  absl::StatusOr<std::vector<double>> ParseRewards(absl::string_view out, size_t expected) const;

  const std::vector<std::string> command_;
  const double timeout_s_;
  const RewardContext context_;
  const std::string name_;
};

absl::Status RewardProgram::Spawn(Child* child) const {
  struct stat dir_stat;
  if (::stat(context_.working_dir.c_str(), &dir_stat) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": working directory '",
                                                   context_.working_dir, "': ", ErrnoText(errno)));
  }
  if (!S_ISDIR(dir_stat.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": working directory '", context_.working_dir, "' is not a directory"));
  }
  Fd stdin_read, stdout_write, stderr_write;
  RETURN_IF_ERROR(MakePipe(&stdin_read, &child->stdin_fd));
  RETURN_IF_ERROR(MakePipe(&child->stdout_fd, &stdout_write));
  RETURN_IF_ERROR(MakePipe(&child->stderr_fd, &stderr_write));

  posix_spawn_file_actions_t actions;
  if (const int rc = ::posix_spawn_file_actions_init(&actions); rc != 0) {
    return absl::InternalError(absl::StrCat("posix_spawn_file_actions_init: ", ErrnoText(rc)));
  }
  posix_spawnattr_t attr;
  if (const int rc = ::posix_spawnattr_init(&attr); rc != 0) {
    ::posix_spawn_file_actions_destroy(&actions);
    return absl::InternalError(absl::StrCat("posix_spawnattr_init: ", ErrnoText(rc)));
  }
  int rc = ::posix_spawn_file_actions_adddup2(&actions, stdin_read.get(), 0);
  if (rc == 0) rc = ::posix_spawn_file_actions_adddup2(&actions, stdout_write.get(), 1);
  if (rc == 0) rc = ::posix_spawn_file_actions_adddup2(&actions, stderr_write.get(), 2);
  if (rc == 0) rc = ::posix_spawn_file_actions_addchdir_np(&actions, context_.working_dir.c_str());
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // No descriptor of the trainer (sockets, checkpoints) leaks into the program.
  if (rc == 0) rc = ::posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
  sigset_t no_signals, default_signals;
  sigemptyset(&no_signals);
  sigemptyset(&default_signals);
  for (const int sig :
       {SIGPIPE, SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM, SIGXFSZ}) {
    sigaddset(&default_signals, sig);
  }
  if (rc == 0) {
    rc = ::posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  }
  if (rc == 0) rc = ::posix_spawnattr_setpgroup(&attr, 0);
  if (rc == 0) rc = ::posix_spawnattr_setsigmask(&attr, &no_signals);
  if (rc == 0) rc = ::posix_spawnattr_setsigdefault(&attr, &default_signals);
  if (rc != 0) {
    ::posix_spawnattr_destroy(&attr);
    ::posix_spawn_file_actions_destroy(&actions);
    return absl::InternalError(absl::StrCat("setting up posix_spawn: ", ErrnoText(rc)));
  }

  std::vector<char*> argv;
  for (const std::string& arg : command_) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  // glibc reports a failed chdir or exec in the child as the return value.
  rc = ::posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), environ);
  ::posix_spawnattr_destroy(&attr);
  ::posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": cannot run it: ", ErrnoText(rc)));
  }
  child->set_pid(pid);
  RETURN_IF_ERROR(SetNonBlocking(child->stdin_fd));
  RETURN_IF_ERROR(SetNonBlocking(child->stdout_fd));
  RETURN_IF_ERROR(SetNonBlocking(child->stderr_fd));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> RewardProgram::Score(const std::vector<RewardInput>& inputs) {
  if (inputs.empty()) return std::vector<double>();
  ASSIGN_OR_RETURN(const std::string payload, EncodeInputs(inputs));

  const SigpipeBlocker sigpipe_blocker;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::min(timeout_s_, kMaxTimeoutS)));
  Child child;
  RETURN_IF_ERROR(Spawn(&child));

  std::string out;
  bool out_overflow = false;
  StderrLines err(context_.on_stderr_line);
  size_t written = 0;
  const auto read_out = [&](absl::string_view data) {
    if (out.size() + data.size() > kMaxStdoutBytes) {
      out_overflow = true;
      return false;
    }
    out.append(data.data(), data.size());
    return true;
  };
  const auto read_err = [&](absl::string_view data) {
    err.Feed(data);
    return true;
  };
  const auto timed_out = [&]() {
    child.KillGroup();
    child.Reap();
    return absl::InvalidArgumentError(
        absl::StrCat(name_, " did not finish within ", timeout_s_, " s (killed)"));
  };

  bool exited = false;
  while (child.stdout_fd.valid() || child.stderr_fd.valid()) {
    const auto now = Clock::now();
    if (now >= deadline) return timed_out();
    const int64_t left_ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    pollfd fds[3];
    nfds_t count = 0;
    int in_slot = -1, out_slot = -1, err_slot = -1;
    if (child.stdin_fd.valid()) {
      in_slot = static_cast<int>(count);
      fds[count++] = {child.stdin_fd.get(), POLLOUT, 0};
    }
    if (child.stdout_fd.valid()) {
      out_slot = static_cast<int>(count);
      fds[count++] = {child.stdout_fd.get(), POLLIN, 0};
    }
    if (child.stderr_fd.valid()) {
      err_slot = static_cast<int>(count);
      fds[count++] = {child.stderr_fd.get(), POLLIN, 0};
    }
    const int ready =
        ::poll(fds, count, static_cast<int>(std::min<int64_t>(left_ms, kExitCheckMs)));
    if (ready < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat(name_, ": poll: ", ErrnoText(errno)));
    }
    if (ready > 0 && in_slot >= 0 && fds[in_slot].revents != 0) {
      const size_t n = std::min(kIoChunk, payload.size() - written);
      const ssize_t put = ::write(child.stdin_fd.get(), payload.data() + written, n);
      if (put > 0) {
        written += static_cast<size_t>(put);
        if (written == payload.size()) child.stdin_fd.Reset();  // end of input
      } else if (put < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        child.stdin_fd.Reset();  // EPIPE: the program stopped reading; its output decides
      }
    }
    if (ready > 0 && out_slot >= 0 && fds[out_slot].revents != 0) {
      ReadAvailable(child.stdout_fd, read_out);
    }
    if (ready > 0 && err_slot >= 0 && fds[err_slot].revents != 0) {
      ReadAvailable(child.stderr_fd, read_err);
    }
    if (out_overflow) {
      child.KillGroup();
      child.Reap();
      return absl::InvalidArgumentError(absl::StrCat(
          name_, " wrote more than ", kMaxStdoutBytes >> 20, " MiB to stdout (killed)"));
    }
    if (child.Exited()) {
      // It is gone; a process it left behind may hold the pipes open. What
      // it wrote is in the pipes already.
      exited = true;
      child.KillGroup();
      child.stdin_fd.Reset();
      while (ReadAvailable(child.stdout_fd, read_out) && Clock::now() < deadline) {
      }
      while (ReadAvailable(child.stderr_fd, read_err) && Clock::now() < deadline) {
      }
      break;
    }
  }
  child.stdin_fd.Reset();
  child.stdout_fd.Reset();
  child.stderr_fd.Reset();
  err.Finish();
  while (!exited && !child.Exited()) {
    if (Clock::now() >= deadline) return timed_out();
    ::poll(nullptr, 0, 5);
  }
  child.KillGroup();  // whatever it left behind
  const int status = child.Reap();
  if (out_overflow) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, " wrote more than ", kMaxStdoutBytes >> 20, " MiB to stdout"));
  }
  if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, " exited with status ", WEXITSTATUS(status), err.Tail()));
  }
  if (status != -1 && WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return absl::InvalidArgumentError(absl::StrCat(name_, " was killed by signal ", sig, " (",
                                                   ::strsignal(sig), ")", err.Tail()));
  }
  return ParseRewards(out, inputs.size());
}

absl::StatusOr<std::vector<double>> RewardProgram::ParseRewards(absl::string_view out,
                                                                size_t expected) const {
  std::vector<double> rewards;
  size_t line_number = 0;
  while (!out.empty()) {
    const size_t newline = out.find('\n');
    const absl::string_view raw = out.substr(0, newline);
    out.remove_prefix(newline == absl::string_view::npos ? out.size() : newline + 1);
    ++line_number;
    const absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty()) continue;
    const auto where = [&]() { return absl::StrCat(name_, ", output line ", line_number, ": "); };
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    } catch (const std::exception&) {
      value = nlohmann::json(nlohmann::json::value_t::discarded);
    }
    if (value.is_object()) {
      const auto reward = value.find("reward");
      if (reward == value.end() || !reward->is_number()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), Quoted(line), " has no number \"reward\""));
      }
      value = *reward;
    }
    if (!value.is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), Quoted(line), " is not a number"));
    }
    const double reward = value.get<double>();
    if (!std::isfinite(reward)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), Quoted(line), " is not a finite number"));
    }
    rewards.push_back(reward);
  }
  if (rewards.size() != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, " wrote ", rewards.size(), " rewards for ", expected, " completions"));
  }
  return rewards;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RewardFunction>> MakeRewardProgram(std::vector<std::string> command,
                                                                  double timeout_s,
                                                                  RewardContext context) {
  if (command.empty() || command[0].empty()) {
    return absl::InvalidArgumentError(
        "grpo.reward.command: the program (its first element) is missing");
  }
  if (!std::isfinite(timeout_s) || timeout_s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grpo.reward.timeout_s must be a positive number of seconds, got ", timeout_s));
  }
  return std::unique_ptr<RewardFunction>(
      new RewardProgram(std::move(command), timeout_s, std::move(context)));
}

}  // namespace sbp
