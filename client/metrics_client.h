// Reading a job's output from the coordinator (JobService.Metrics and
// JobService.Logs): for `sbp metrics`, `sbp logs` and `sbp plot ID`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/coordinator_client.h"
#include "client/plot/run_metrics.h"
#include "streambp/v1/job_output.pb.h"

namespace sbp::cli {

struct OutputReadOptions {
  int attempt = 0;        // 0: every attempt
  int64_t from_step = 0;  // metrics only: steps >= this
  bool follow = false;    // until the job has ended
};

// What the coordinator kept of the lines read, from the stream's last
// message: per attempt and rank, and its caps.
struct OutputKept {
  std::vector<streambp::v1::JobOutputSummary> summaries;
  int64_t max_lines = 0;
  int64_t max_bytes = 0;
};

// Streams job `id`'s lines of `kind` to `on_line`, oldest first. A stream
// that breaks (UNAVAILABLE: the coordinator restarted) is opened again after
// the last line received, for up to two minutes without progress (a stream
// that never opened is an error at once); other
// errors (NOT_FOUND, INVALID_ARGUMENT, ...) return at once.
absl::Status ReadJobOutput(CoordinatorClient& client, CoordinatorClient::Output kind,
                           const std::string& id, const OutputReadOptions& options,
                           const std::function<void(const streambp::v1::JobOutputLine&)>& on_line,
                           OutputKept* kept = nullptr);

// The metrics lines (JSON objects, as in metrics.jsonl) of job `id` stored
// at the coordinator, oldest first; `attempt` N: that attempt's lines; 0: the
// run's curve as its metrics.jsonl holds it (MetricsCurve).
absl::StatusOr<std::vector<std::string>> FetchMetricsLines(CoordinatorClient& client,
                                                           const std::string& id, int attempt = 0);
// The same over a new connection from the global flags.
absl::StatusOr<std::vector<std::string>> FetchMetricsLines(const GlobalOptions& global,
                                                           const std::string& id, int attempt = 0);

// `sbp plot ID`'s source: job id -> the run's curve from the coordinator
// named by `global` (read when called, after the flags are parsed).
plot::JobMetricsSource CoordinatorMetricsSource(const GlobalOptions* global);

// Lines of every attempt (attempt, text) in the order stored -> one curve:
// an attempt resumes after its checkpoint, so its first step replaces the
// earlier attempts' lines from that step on (as in metrics.jsonl); lines of
// an older attempt arriving after a newer one's are left out.
std::vector<std::string> MetricsCurve(const std::vector<std::pair<int, std::string>>& lines);

}  // namespace sbp::cli
