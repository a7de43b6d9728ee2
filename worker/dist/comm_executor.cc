#include "worker/dist/comm_executor.h"

#include <chrono>

namespace sbp {

CommExecutor::CommExecutor() : thread_([this] { Loop(); }) {}

CommExecutor::~CommExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

int64_t CommExecutor::Submit(Task task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
  return ++submitted_;
}

absl::Status CommExecutor::WaitFor(int64_t ticket) {
  const auto start = std::chrono::steady_clock::now();
  struct Wanted {
    CommExecutor* self;
    int64_t ticket;
  } wanted{this, ticket};
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Wanted* w) ABSL_NO_THREAD_SAFETY_ANALYSIS { return w->self->done_ >= w->ticket; },
      &wanted));
  blocked_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return error_;
}

absl::Status CommExecutor::WaitAll() {
  int64_t last = 0;
  {
    absl::MutexLock lock(&mu_);
    last = submitted_;
  }
  return WaitFor(last);
}

absl::Status CommExecutor::Run(Task task) { return WaitFor(Submit(std::move(task))); }

double CommExecutor::blocked_seconds() const {
  absl::MutexLock lock(&mu_);
  return blocked_seconds_;
}

void CommExecutor::Loop() {
  while (true) {
    Task task;
    bool skip = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CommExecutor* self)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->stopping_ || !self->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      skip = !error_.ok();
    }
    absl::Status status = skip ? absl::OkStatus() : task();
    task = nullptr;  // release what the task holds before it counts as done
    absl::MutexLock lock(&mu_);
    if (!status.ok() && error_.ok()) error_ = std::move(status);
    ++done_;
  }
}

}  // namespace sbp
