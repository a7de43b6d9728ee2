// The job lifecycle and how failed attempts are handled.
//
//   PENDING -> SCHEDULED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
//   SCHEDULED | RUNNING -> RETRYING -> PENDING   (restarts left)
//   SCHEDULED | RUNNING -> FAILED                (not retryable, or no restarts left)
//   SCHEDULED | RUNNING -> PENDING               (preempted: checkpointed, waits to resume)
//   PENDING | SCHEDULED | RUNNING | RETRYING -> CANCELLED
//
// Values equal those of streambp.v1.JobState / FailureClass.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sbp::server {

enum class JobState {
  kUnspecified = 0,
  kPending = 1,
  kScheduled = 2,
  kRunning = 3,
  kSucceeded = 4,
  kFailed = 5,
  kCancelled = 6,
  kRetrying = 7,
};
inline constexpr JobState kAllJobStates[] = {
    JobState::kPending, JobState::kScheduled, JobState::kRunning, JobState::kSucceeded,
    JobState::kFailed,  JobState::kCancelled, JobState::kRetrying};

enum class FailureClass {
  kUnspecified = 0,
  kOutOfMemory = 1,
  kBadInput = 2,
  kLostWorker = 3,
  kStalled = 4,
  kInternal = 5,
  kStorage = 6,
  kDiverged = 7,
};

// "PENDING", "RUNNING", ...; parse accepts exactly these names.
absl::string_view JobStateName(JobState state);
absl::StatusOr<JobState> ParseJobState(absl::string_view name);
// "OUT_OF_MEMORY", ...; "" for kUnspecified.
absl::string_view FailureClassName(FailureClass failure);
absl::StatusOr<FailureClass> ParseFailureClass(absl::string_view name);

bool IsTerminal(JobState state);
// Whether `from -> to` is an edge of the lifecycle above.
bool IsTransitionAllowed(JobState from, JobState to);
// OK, or FailedPrecondition "cannot move job from SUCCEEDED to RUNNING".
absl::Status CheckTransition(JobState from, JobState to);

// Lost workers, stalls and internal errors are retried; out-of-memory and bad
// input fail the same way again and are not.
bool IsRetryable(FailureClass failure);

// What happens to a job whose attempt `attempt` (1-based) failed.
struct FailureDecision {
  JobState next = JobState::kFailed;  // kRetrying or kFailed
  std::string reason;                 // says why, and for kFailed what to change
};
// `detail` describes the failure ("worker w-1 (rank 0) lost: no heartbeat for 15 s").
// `preemptions`: attempts so far that ended by preemption, which are not
// restarts.
FailureDecision DecideOnFailure(FailureClass failure, int attempt, int max_restarts,
                                absl::string_view detail, absl::string_view last_checkpoint,
                                int preemptions = 0);

}  // namespace sbp::server
