// A single thread that runs communication tasks in submission order, so that
// the reduce-scatter of one layer's gradients overlaps the backward of the
// next while every collective still reaches the communicator from one thread
// in one order on every rank. After a task fails, later tasks are skipped and
// every wait returns the first error.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace sbp {

class CommExecutor {
 public:
  using Task = std::function<absl::Status()>;
  CommExecutor();
  ~CommExecutor();  // finishes the queued tasks
  CommExecutor(const CommExecutor&) = delete;
  CommExecutor& operator=(const CommExecutor&) = delete;

  // Queues `task`; returns its ticket (1, 2, ...).
  int64_t Submit(Task task);
  // Waits until the task with `ticket` (and all before it) ran.
  absl::Status WaitFor(int64_t ticket);
  // Waits until the queue is empty.
  absl::Status WaitAll();
  // Submit + WaitFor.
  absl::Status Run(Task task);
  // Seconds the calling threads spent blocked in WaitFor/WaitAll/Run.
  double blocked_seconds() const;

 private:
  void Loop();

  mutable absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  int64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  double blocked_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace sbp
