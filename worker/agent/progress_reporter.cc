#include "worker/agent/progress_reporter.h"

#include <chrono>

#include "common/logging.h"
#include "worker/agent/backoff.h"

namespace sbp {

ProgressReporter::ProgressReporter(SendFn send) : send_(std::move(send)) {
  thread_ = std::thread([this] { Loop(); });
}

ProgressReporter::~ProgressReporter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void ProgressReporter::PostProgress(const streambp::v1::JobProgress& progress) {
  absl::MutexLock lock(&mu_);
  progress_ = progress;
  progress_dirty_ = true;
  ++progress_version_;
}

void ProgressReporter::PostCheckpoint(const std::string& path) {
  absl::MutexLock lock(&mu_);
  checkpoints_.push_back(path);
}

void ProgressReporter::PostMessage(const std::string& message) {
  absl::MutexLock lock(&mu_);
  messages_.push_back(message);
}

bool ProgressReporter::HasWork() const {
  return progress_dirty_ || !checkpoints_.empty() || !messages_.empty();
}

bool ProgressReporter::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [this]()
                  ABSL_SHARED_LOCKS_REQUIRED(mu_) { return aborted_ || (!HasWork() && !sending_); };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  return !aborted_ && !HasWork() && !sending_;
}

bool ProgressReporter::cancel_requested() const {
  absl::MutexLock lock(&mu_);
  return cancel_requested_;
}

bool ProgressReporter::aborted() const {
  absl::MutexLock lock(&mu_);
  return aborted_;
}

absl::Status ProgressReporter::last_error() const {
  absl::MutexLock lock(&mu_);
  return last_error_;
}

void ProgressReporter::Loop() {
  Backoff backoff;
  absl::MutexLock lock(&mu_);
  while (true) {
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopping_ || (!aborted_ && HasWork());
    };
    mu_.Await(absl::Condition(&ready));
    if (stopping_) return;

    ProgressUpdate update;
    update.progress = progress_;
    if (!checkpoints_.empty()) update.checkpoint = checkpoints_.front();
    if (!messages_.empty()) update.message = messages_.front();
    const int64_t version = progress_version_;
    sending_ = true;
    mu_.Unlock();
    absl::StatusOr<bool> result = send_(update);
    mu_.Lock();
    sending_ = false;

    if (result.ok()) {
      backoff.Reset();
      last_error_ = absl::OkStatus();
      if (*result) cancel_requested_ = true;
      if (version == progress_version_) progress_dirty_ = false;
      if (!update.checkpoint.empty()) checkpoints_.pop_front();
      if (!update.message.empty()) messages_.pop_front();
      continue;
    }
    if (result.status().code() == absl::StatusCode::kAborted) {
      aborted_ = true;
      last_error_ = result.status();
      LOG(WARNING) << "progress report rejected, stopping this attempt: "
                   << result.status().message();
      continue;
    }
    if (last_error_.ok()) {
      LOG(WARNING) << "progress report failed (will retry): " << result.status().message();
    }
    last_error_ = result.status();
    const absl::Duration wait = absl::FromChrono(backoff.Next());
    auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
    mu_.AwaitWithTimeout(absl::Condition(&stopping), wait);
  }
}

}  // namespace sbp
