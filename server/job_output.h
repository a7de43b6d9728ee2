// A job's output as the coordinator keeps it (proto/streambp/v1/job_output.proto):
// the metrics lines rank 0 writes to metrics.jsonl and the log lines of the
// job's training on each rank, stored per attempt and rank under caps. Plain
// records and the checks on what a worker sends; no gRPC types.
//
// The caps, per attempt and rank and kind (CoordinatorOptions; the
// coordinator's --max-{metrics,log}-{lines,bytes}):
//   - metrics over the cap are thinned: the stride doubles (every 2nd line
//     kept, then every 4th, ...), lines off the stride are deleted and later
//     ones off it are not stored, so the whole curve stays, evenly sampled,
//     from its first step on;
//   - logs over the cap keep their first lines (how the attempt started, up
//     to a tenth of the cap) and drop the oldest of the rest until the rank
//     is back at nine tenths of the cap.
// What was dropped is counted (JobOutputSummary.dropped) and `sbp metrics` /
// `sbp logs` say so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sbp::server {

enum class OutputKind { kMetrics = 1, kLogs = 2 };  // stored as these numbers

// "metrics", "logs".
absl::string_view OutputKindName(OutputKind kind);

// What one rank of one attempt keeps of one kind.
struct OutputCaps {
  int64_t max_lines = 100000;
  int64_t max_bytes = int64_t{64} << 20;
};
inline constexpr OutputCaps kDefaultMetricsCaps{100000, int64_t{64} << 20};
inline constexpr OutputCaps kDefaultLogCaps{100000, int64_t{16} << 20};
// The smallest caps a coordinator accepts: a cap must hold a few of the
// longest lines.
inline constexpr int64_t kMinOutputCapLines = 10;
inline constexpr int64_t kMinOutputCapBytes = int64_t{1} << 20;

// Limits on one AppendOutput call and one line.
inline constexpr size_t kMaxOutputLineBytes = 64 * 1024;
inline constexpr size_t kMaxOutputBatchLines = 1000;
inline constexpr size_t kMaxOutputBatchBytes = 2 << 20;
// One message of a Metrics or Logs stream: at most this many lines, and no
// more lines once this many bytes are in it.
inline constexpr int kOutputPageLines = 500;
inline constexpr size_t kOutputPageBytes = 1 << 20;

// InvalidArgument naming the cap ("max_log_lines: ...") unless both are at
// least the minimum.
absl::Status CheckOutputCaps(const OutputCaps& caps, OutputKind kind);

// One rank's lines of one kind, numbered from `first` (AppendOutputRequest).
struct OutputBatch {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  OutputKind kind = OutputKind::kLogs;
  int64_t first = 0;
  std::vector<std::string> lines;
  std::vector<int64_t> steps;  // metrics: each line's "step" (0 when absent); logs: empty
};

// The "step" of a metrics line (0 when it has none); InvalidArgument naming
// `field` when the line is not one JSON object.
absl::StatusOr<int64_t> MetricsLineStep(absl::string_view line, absl::string_view field);

// A stored line.
struct OutputLine {
  int64_t cursor = 0;  // increasing along the job's lines of one kind
  int attempt = 0;
  int rank = 0;
  absl::Time time = absl::UnixEpoch();  // received
  std::string text;
};

// What is stored of one attempt, rank and kind.
struct OutputSummary {
  int attempt = 0;
  int rank = 0;
  int64_t next_line = 0;  // the worker's number of the next line expected
  int64_t lines = 0;
  int64_t bytes = 0;
  int64_t dropped = 0;
  int64_t stride = 1;  // metrics: lines kept are those numbered a multiple of it
};

// Which lines to read.
struct OutputQuery {
  std::string job_id;
  OutputKind kind = OutputKind::kMetrics;
  int attempt = 0;  // 0: every attempt
  int64_t after_cursor = 0;
  int64_t from_step = 0;  // metrics only
  int limit = kOutputPageLines;
};

// One page of a job's lines with the summaries of the selection; `more`:
// the page was cut short (lines or bytes), read on from its last cursor.
// `ended`: the job had ended when the page was read (terminal, and no worker
// holds its attempt), so no line can follow those stored.
struct OutputPage {
  std::vector<OutputLine> lines;
  std::vector<OutputSummary> summaries;
  bool more = false;
  bool ended = false;
  OutputCaps caps;  // of the kind read, as the coordinator enforces them
};

}  // namespace sbp::server
