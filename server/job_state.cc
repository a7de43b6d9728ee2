#include "server/job_state.h"

#include "absl/strings/str_cat.h"

namespace sbp::server {

absl::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kUnspecified:
      return "UNSPECIFIED";
    case JobState::kPending:
      return "PENDING";
    case JobState::kScheduled:
      return "SCHEDULED";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
    case JobState::kRetrying:
      return "RETRYING";
  }
  return "UNSPECIFIED";
}

absl::StatusOr<JobState> ParseJobState(absl::string_view name) {
  if (name == "UNSPECIFIED") return JobState::kUnspecified;
  for (JobState state : kAllJobStates) {
    if (JobStateName(state) == name) return state;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown job state \"", name, "\""));
}

absl::string_view FailureClassName(FailureClass failure) {
  switch (failure) {
    case FailureClass::kUnspecified:
      return "";
    case FailureClass::kOutOfMemory:
      return "OUT_OF_MEMORY";
    case FailureClass::kBadInput:
      return "BAD_INPUT";
    case FailureClass::kLostWorker:
      return "LOST_WORKER";
    case FailureClass::kStalled:
      return "STALLED";
    case FailureClass::kInternal:
      return "INTERNAL";
    case FailureClass::kStorage:
      return "STORAGE";
    case FailureClass::kDiverged:
      return "DIVERGED";
  }
  return "";
}

absl::StatusOr<FailureClass> ParseFailureClass(absl::string_view name) {
  for (FailureClass failure :
       {FailureClass::kUnspecified, FailureClass::kOutOfMemory, FailureClass::kBadInput,
        FailureClass::kLostWorker, FailureClass::kStalled, FailureClass::kInternal,
        FailureClass::kStorage, FailureClass::kDiverged}) {
    if (FailureClassName(failure) == name) return failure;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown failure class \"", name, "\""));
}

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

bool IsTransitionAllowed(JobState from, JobState to) {
  using S = JobState;
  if (to == S::kCancelled) {
    return from == S::kPending || from == S::kScheduled || from == S::kRunning ||
           from == S::kRetrying;
  }
  switch (from) {
    case S::kUnspecified:
      return to == S::kPending;
    case S::kPending:
      return to == S::kScheduled;
    case S::kScheduled:
      return to == S::kRunning || to == S::kRetrying || to == S::kFailed || to == S::kPending;
    case S::kRunning:
      return to == S::kSucceeded || to == S::kFailed || to == S::kRetrying || to == S::kPending;
    case S::kRetrying:
      return to == S::kPending || to == S::kFailed;
    case S::kSucceeded:
    case S::kFailed:
    case S::kCancelled:
      return false;
  }
  return false;
}

absl::Status CheckTransition(JobState from, JobState to) {
  if (IsTransitionAllowed(from, to)) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cannot move a job from ", JobStateName(from), " to ", JobStateName(to)));
}

bool IsRetryable(FailureClass failure) {
  return failure == FailureClass::kLostWorker || failure == FailureClass::kStalled ||
         failure == FailureClass::kInternal || failure == FailureClass::kStorage;
}

FailureDecision DecideOnFailure(FailureClass failure, int attempt, int max_restarts,
                                absl::string_view detail, absl::string_view last_checkpoint,
                                int preemptions) {
  FailureDecision decision;
  const std::string head = absl::StrCat("attempt ", attempt, " failed: ", detail);
  switch (failure) {
    case FailureClass::kOutOfMemory:
      decision.reason = absl::StrCat(
          head,
          "; out of memory is not retried (the same plan runs out again): lower seq_len or "
          "streambp.chunk_tokens, use streambp.mode: stream, or run on workers with more memory");
      return decision;
    case FailureClass::kBadInput:
      decision.reason = absl::StrCat(
          head, "; bad input is not retried: fix the spec, data or model and submit again");
      return decision;
    case FailureClass::kDiverged:
      decision.reason =
          absl::StrCat(head,
                       "; a diverged run is not retried (it would diverge again): change the spec, "
                       "or submit a new job with resume_from: a good checkpoint");
      return decision;
    default:
      break;
  }
  const int restarts_used = attempt - 1 - preemptions;
  if (restarts_used >= max_restarts) {
    decision.reason = absl::StrCat(head, "; no restarts left (max_restarts: ", max_restarts,
                                   "); raise max_restarts to retry more often");
    return decision;
  }
  decision.next = JobState::kRetrying;
  decision.reason =
      absl::StrCat(head, "; restarting (restart ", restarts_used + 1, " of ", max_restarts, ") ",
                   last_checkpoint.empty() ? std::string("from the start (no checkpoint yet)")
                                           : absl::StrCat("from checkpoint ", last_checkpoint));
  return decision;
}

}  // namespace sbp::server
