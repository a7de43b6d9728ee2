// Small helpers shared by the job manager's source files (not a public API).
#pragma once

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/job_manager.h"
#include "server/scheduler.h"

namespace sbp::server::manager_internal {

inline constexpr size_t kMaxIdLength = 128;
// A worker's reported version ("0.1.0 (abc1234)"), shown in every ListWorkers.
inline constexpr size_t kMaxWorkerVersionLength = 128;

inline constexpr size_t kMaxRequestIdLength = 200;
inline constexpr size_t kMaxTextLength = 64 * 1024;

// InvalidArgument "<field>: <reason>".
inline absl::Status InvalidField(absl::string_view field, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
}

// [A-Za-z0-9][A-Za-z0-9._-]*, at most kMaxIdLength characters.
inline bool ValidId(absl::string_view id) {
  if (id.empty() || id.size() > kMaxIdLength || !absl::ascii_isalnum(id.front())) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
  });
}

// The rendezvous scope of an attempt: "<job>/<attempt>".
inline std::string Scope(absl::string_view job_id, int attempt) {
  return absl::StrCat(job_id, "/", attempt);
}

inline SchedulerJob ToSchedulerJob(const JobRecord& job) {
  return SchedulerJob{job.id,
                      job.seq,
                      job.priority,
                      job.world_size,
                      job.device,
                      job.required_memory_bytes,
                      job.owner,
                      job.state == JobState::kPending ? job.preempted_by : "",
                      job.required_host_memory_bytes,
                      job.required_offload_disk_bytes,
                      job.alternative_needs};
}

inline absl::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kSucceeded:
      return "SUCCEEDED";
    case Outcome::kFailed:
      return "FAILED";
    case Outcome::kCancelled:
      return "CANCELLED";
    case Outcome::kPreempted:
      return "PREEMPTED";
    case Outcome::kUnspecified:
      break;
  }
  return "UNSPECIFIED";
}

// "15 s".
inline std::string Seconds(absl::Duration d) { return absl::StrCat(absl::ToInt64Seconds(d), " s"); }

}  // namespace sbp::server::manager_internal
