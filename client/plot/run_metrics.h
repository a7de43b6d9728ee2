// Where `sbp plot` gets its metrics.jsonl lines: a run directory (or the
// metrics.jsonl file itself) read directly, or — for a job id — a source
// the caller plugs in (the coordinator's metrics).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sbp::plot {

struct MetricsLines {
  std::string run_name;  // the chart's title
  std::string origin;    // where the lines came from, for messages
  std::vector<std::string> lines;
};

// The lines of a job's metrics by job id.
using JobMetricsSource = std::function<absl::StatusOr<MetricsLines>(const std::string& job_id)>;

// `path`/metrics.jsonl of a run directory, or `path` when it is a file. The
// run's name is its job id or job name from run.json, else the directory's
// name. NotFound/FailedPrecondition naming the path when there is no such
// file or it holds no lines yet.
absl::StatusOr<MetricsLines> ReadRunMetrics(const std::string& path);

// Whether `target` names a path rather than a job id: it exists, or it
// contains a '/' (job ids never do).
bool LooksLikePath(const std::string& target);

}  // namespace sbp::plot
