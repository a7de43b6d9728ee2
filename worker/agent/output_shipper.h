// Ships one attempt's output to the coordinator (WorkerService.AppendOutput,
// proto/streambp/v1/job_output.proto) from its own thread, so that a slow or
// restarting coordinator never holds training up: the metrics lines rank 0
// writes to metrics.jsonl (PostMetrics) and the log lines logged on the
// thread that runs the job (attached as that thread's LogSink).
//
// Each kind's lines are numbered from 0 and go in batches, one call every
// kSendInterval at most (at once when flushing). A failed call is retried
// with backoff; the coordinator skips the numbers it already has, so nothing
// is stored twice. While the coordinator is away, at most kMaxQueued lines of
// each kind wait and newer ones are dropped (their numbers are skipped, which
// the coordinator counts as dropped). ABORTED (the attempt is over there),
// UNIMPLEMENTED (an older coordinator), PERMISSION_DENIED and UNAUTHENTICATED
// end shipping; INVALID_ARGUMENT drops that batch.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/logging.h"

namespace sbp {

class OutputShipper final : public LogSink {
 public:
  // What one AppendOutput call carries: each kind's lines, the first one
  // numbered `*_first` and the others following it.
  struct Batch {
    int64_t metrics_first = 0;
    std::vector<std::string> metrics;
    int64_t logs_first = 0;
    std::vector<std::string> logs;
  };
  using SendFn = std::function<absl::Status(const Batch&)>;

  static constexpr absl::Duration kSendInterval = absl::Milliseconds(200);
  static constexpr size_t kMaxQueued = 20000;
  // The coordinator's limits (job_output.proto): lines and bytes per call,
  // bytes per line. Longer log lines are cut; longer metrics lines dropped.
  static constexpr size_t kMaxBatchLines = 1000;
  static constexpr size_t kMaxBatchBytes = 1 << 20;
  static constexpr size_t kMaxLineBytes = 16 * 1024;
  static constexpr size_t kMaxMetricsLineBytes = 64 * 1024;

  explicit OutputShipper(SendFn send);
  ~OutputShipper() override;  // stops the thread; lines not sent yet are dropped

  void PostMetrics(std::string line);
  // A log line (LogSink); a multi-line message becomes one line per line.
  void Send(LogLevel level, const std::string& line) override;

  // Waits until everything posted so far is delivered (true), shipping
  // stopped for good, or `timeout` passes (false).
  bool Flush(absl::Duration timeout);

 private:
  struct Queue {
    int64_t next = 0;                                   // the number of the next line posted
    std::deque<std::pair<int64_t, std::string>> lines;  // numbered, oldest first
  };
  void Post(Queue& queue, std::string line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !metrics_.lines.empty() || !logs_.lines.empty();
  }
  // The next batch: a run of consecutive numbers of each kind from the front.
  Batch NextBatch() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drop(const Batch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop();

  SendFn send_;
  mutable absl::Mutex mu_;
  Queue metrics_ ABSL_GUARDED_BY(mu_);
  Queue logs_ ABSL_GUARDED_BY(mu_);
  bool sending_ ABSL_GUARDED_BY(mu_) = false;
  int flushing_ ABSL_GUARDED_BY(mu_) = 0;  // callers waiting in Flush: no pause between calls
  bool gave_up_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sbp
