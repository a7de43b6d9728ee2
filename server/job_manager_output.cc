// JobManager: a job's output lines (server/job_output.h): workers append
// them, clients read them.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/job_manager.h"
#include "server/job_manager_internal.h"

namespace sbp::server {

using manager_internal::InvalidField;

namespace {

// Checks one kind's lines of a report and adds their size to `bytes`.
absl::Status CheckLines(const std::vector<std::string>& lines, absl::string_view field,
                        size_t* bytes) {
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].size() > kMaxOutputLineBytes) {
      return InvalidField(absl::StrCat(field, "[", i, "]"),
                          absl::StrCat("must be at most ", kMaxOutputLineBytes, " bytes (got ",
                                       lines[i].size(), ")"));
    }
    *bytes += lines[i].size();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status JobManager::AppendOutput(const OutputReport& report) {
  if (report.job_id.empty()) return InvalidField("job_id", "is required");
  if (report.attempt < 1) {
    return InvalidField("attempt", absl::StrCat("must be at least 1 (got ", report.attempt, ")"));
  }
  if (report.rank < 0) {
    return InvalidField("rank", absl::StrCat("must not be negative (got ", report.rank, ")"));
  }
  if (report.metrics_first < 0 || report.logs_first < 0) {
    return InvalidField(report.metrics_first < 0 ? "metrics_first" : "logs_first",
                        "must not be negative");
  }
  const size_t count = report.metrics_lines.size() + report.log_lines.size();
  if (count > kMaxOutputBatchLines) {
    return InvalidField("metrics_lines, log_lines",
                        absl::StrCat("at most ", kMaxOutputBatchLines,
                                     " lines per call together (got ", count, ")"));
  }
  size_t bytes = 0;
  RETURN_IF_ERROR(CheckLines(report.metrics_lines, "metrics_lines", &bytes));
  RETURN_IF_ERROR(CheckLines(report.log_lines, "log_lines", &bytes));
  if (bytes > kMaxOutputBatchBytes) {
    return InvalidField("metrics_lines, log_lines",
                        absl::StrCat("at most ", kMaxOutputBatchBytes,
                                     " bytes per call together (got ", bytes, ")"));
  }
  OutputBatch metrics{report.job_id,        report.attempt,       report.rank, OutputKind::kMetrics,
                      report.metrics_first, report.metrics_lines, {}};
  for (size_t i = 0; i < metrics.lines.size(); ++i) {
    ASSIGN_OR_RETURN(const int64_t step,
                     MetricsLineStep(metrics.lines[i], absl::StrCat("metrics_lines[", i, "]")));
    metrics.steps.push_back(step);
  }
  OutputBatch logs{report.job_id,     report.attempt,   report.rank, OutputKind::kLogs,
                   report.logs_first, report.log_lines, {}};
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(WorkerEntry * w, LiveWorker(report.worker_id));
    const bool holds =
        std::any_of(w->active.begin(), w->active.end(), [&](const AssignmentRecord& a) {
          return a.job_id == report.job_id && a.attempt == report.attempt && a.rank == report.rank;
        });
    if (!holds) {
      return absl::AbortedError(absl::StrCat("worker ", w->record.id, " does not hold rank ",
                                             report.rank, " of job ", report.job_id, " attempt ",
                                             report.attempt));
    }
    RETURN_IF_ERROR(store_->AppendOutput({std::move(metrics), std::move(logs)},
                                         options_.metrics_caps, options_.log_caps, absl::Now()));
  }
  output_hub_.Notify(report.job_id);
  return absl::OkStatus();
}

absl::StatusOr<OutputPage> JobManager::ReadOutput(const Identity& caller,
                                                  const OutputQuery& query) {
  if (query.attempt < 0) {
    return InvalidField("attempt", absl::StrCat("must not be negative (got ", query.attempt, ")"));
  }
  if (query.after_cursor < 0) {
    return InvalidField("after_cursor",
                        absl::StrCat("must not be negative (got ", query.after_cursor, ")"));
  }
  if (query.from_step < 0) {
    return InvalidField("from_step",
                        absl::StrCat("must not be negative (got ", query.from_step, ")"));
  }
  // Access exactly as Get: the owner or an admin; anyone else NOT_FOUND.
  ASSIGN_OR_RETURN(const JobRecord job, GetJob(caller, query.job_id));
  if (query.attempt > job.attempt) {
    return InvalidField("attempt",
                        absl::StrCat("job ", job.id, " has had ", job.attempt,
                                     " attempt(s); there is no attempt ", query.attempt));
  }
  absl::MutexLock lock(&mu_);
  // Whether the job has ended, and the lines, read together: lines come
  // only from a rank that is held, so none can follow an ended job's.
  ASSIGN_OR_RETURN(const JobRecord now, store_->GetJob(query.job_id));
  const bool ended = IsTerminal(now.state) && !AttemptStillHeld(now);
  ASSIGN_OR_RETURN(OutputPage page, store_->ReadOutput(query));
  ASSIGN_OR_RETURN(page.summaries,
                   store_->OutputSummaries(query.job_id, query.kind, query.attempt));
  page.ended = ended;
  page.caps = query.kind == OutputKind::kMetrics ? options_.metrics_caps : options_.log_caps;
  return page;
}

}  // namespace sbp::server
