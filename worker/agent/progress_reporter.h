// Sends one attempt's progress to the coordinator from its own thread, so a
// slow or restarting coordinator never holds up training. The latest progress
// replaces older unsent progress; checkpoint notices and log lines are queued
// and each delivered once. Failed sends are retried with backoff. The answer
// to every report says whether the job was cancelled; ABORTED (a stale
// attempt) ends reporting for good.
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "streambp/v1/jobs.pb.h"

namespace sbp {

struct ProgressUpdate {
  std::optional<streambp::v1::JobProgress> progress;  // the latest known, if any
  std::string checkpoint;                             // at most one notice
  std::string message;                                // at most one log line
};

class ProgressReporter {
 public:
  // `send` delivers one update and returns whether cancellation was requested.
  using SendFn = std::function<absl::StatusOr<bool>(const ProgressUpdate&)>;

  explicit ProgressReporter(SendFn send);
  ~ProgressReporter();  // stops the thread; unsent updates are dropped

  void PostProgress(const streambp::v1::JobProgress& progress);
  void PostCheckpoint(const std::string& path);
  void PostMessage(const std::string& message);

  // Waits until everything posted so far is delivered (true), reporting was
  // aborted, or `timeout` passes (false).
  bool Flush(absl::Duration timeout);

  bool cancel_requested() const;
  bool aborted() const;  // the coordinator answered ABORTED: this attempt is stale
  absl::Status last_error() const;

 private:
  void Loop();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SendFn send_;
  mutable absl::Mutex mu_;
  std::optional<streambp::v1::JobProgress> progress_ ABSL_GUARDED_BY(mu_);
  bool progress_dirty_ ABSL_GUARDED_BY(mu_) = false;
  int64_t progress_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::string> checkpoints_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> messages_ ABSL_GUARDED_BY(mu_);
  bool cancel_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool sending_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace sbp
