#include "server/job_state.h"

#include <gtest/gtest.h>

#include <set>

#include "absl/strings/str_cat.h"

namespace sbp::server {
namespace {

using S = JobState;

TEST(JobStateTest, AllowedTransitionsAreExactlyTheLifecycle) {
  const std::set<std::pair<S, S>> allowed = {
      {S::kUnspecified, S::kPending},
      {S::kPending, S::kScheduled},
      {S::kScheduled, S::kRunning},
      {S::kRunning, S::kSucceeded},
      {S::kRunning, S::kFailed},
      {S::kScheduled, S::kFailed},
      {S::kRunning, S::kRetrying},
      {S::kScheduled, S::kRetrying},
      {S::kRetrying, S::kPending},
      {S::kRetrying, S::kFailed},
      {S::kPending, S::kCancelled},
      {S::kScheduled, S::kCancelled},
      {S::kRunning, S::kCancelled},
      {S::kRetrying, S::kCancelled},
      // Preempted: back to waiting, to resume from the checkpoint.
      {S::kScheduled, S::kPending},
      {S::kRunning, S::kPending},
  };
  std::vector<S> states(std::begin(kAllJobStates), std::end(kAllJobStates));
  states.push_back(S::kUnspecified);
  for (S from : states) {
    for (S to : states) {
      const bool want = allowed.count({from, to}) > 0;
      EXPECT_EQ(IsTransitionAllowed(from, to), want)
          << JobStateName(from) << " -> " << JobStateName(to);
      absl::Status status = CheckTransition(from, to);
      EXPECT_EQ(status.ok(), want);
      if (!want) {
        EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_EQ(status.message(), absl::StrCat("cannot move a job from ", JobStateName(from),
                                                 " to ", JobStateName(to)));
      }
    }
  }
}

TEST(JobStateTest, TerminalStates) {
  for (S s : kAllJobStates) {
    EXPECT_EQ(IsTerminal(s), s == S::kSucceeded || s == S::kFailed || s == S::kCancelled);
  }
}

TEST(JobStateTest, NamesRoundTrip) {
  for (S s : kAllJobStates) EXPECT_EQ(*ParseJobState(JobStateName(s)), s);
  EXPECT_FALSE(ParseJobState("running").ok());
  for (FailureClass f :
       {FailureClass::kUnspecified, FailureClass::kOutOfMemory, FailureClass::kBadInput,
        FailureClass::kLostWorker, FailureClass::kStalled, FailureClass::kInternal}) {
    EXPECT_EQ(*ParseFailureClass(FailureClassName(f)), f);
  }
  EXPECT_EQ(FailureClassName(FailureClass::kOutOfMemory), "OUT_OF_MEMORY");
}

TEST(JobStateTest, RetryableClasses) {
  EXPECT_TRUE(IsRetryable(FailureClass::kLostWorker));
  EXPECT_TRUE(IsRetryable(FailureClass::kStalled));
  EXPECT_TRUE(IsRetryable(FailureClass::kInternal));
  EXPECT_FALSE(IsRetryable(FailureClass::kOutOfMemory));
  EXPECT_FALSE(IsRetryable(FailureClass::kBadInput));
}

TEST(JobStateTest, RetriesWhileRestartsRemain) {
  FailureDecision d = DecideOnFailure(FailureClass::kLostWorker, 1, 2, "worker w-1 lost", "");
  EXPECT_EQ(d.next, S::kRetrying);
  EXPECT_EQ(d.reason,
            "attempt 1 failed: worker w-1 lost; restarting (restart 1 of 2) from the start (no "
            "checkpoint yet)");
  d = DecideOnFailure(FailureClass::kStalled, 2, 2, "no progress", "runs/x/step-50");
  EXPECT_EQ(d.next, S::kRetrying);
  EXPECT_EQ(d.reason,
            "attempt 2 failed: no progress; restarting (restart 2 of 2) from checkpoint "
            "runs/x/step-50");
  d = DecideOnFailure(FailureClass::kInternal, 3, 2, "boom", "");
  EXPECT_EQ(d.next, S::kFailed);
  EXPECT_EQ(d.reason,
            "attempt 3 failed: boom; no restarts left (max_restarts: 2); raise max_restarts to "
            "retry more often");
  EXPECT_EQ(DecideOnFailure(FailureClass::kLostWorker, 1, 0, "x", "").next, S::kFailed);
}

TEST(JobStateTest, PreemptedAttemptsAreNotRestarts) {
  // Attempt 3 after two preemptions is the first restart's worth of failure.
  FailureDecision d = DecideOnFailure(FailureClass::kLostWorker, 3, 1, "lost", "", 2);
  EXPECT_EQ(d.next, S::kRetrying);
  EXPECT_NE(d.reason.find("restart 1 of 1"), std::string::npos) << d.reason;
  EXPECT_EQ(DecideOnFailure(FailureClass::kLostWorker, 3, 0, "lost", "", 2).next, S::kFailed);
}

TEST(JobStateTest, OutOfMemoryAndBadInputAreNotRetried) {
  FailureDecision oom = DecideOnFailure(FailureClass::kOutOfMemory, 1, 3, "rank 0 OOM", "");
  EXPECT_EQ(oom.next, S::kFailed);
  EXPECT_NE(oom.reason.find("out of memory is not retried"), std::string::npos);
  EXPECT_NE(oom.reason.find("lower seq_len or streambp.chunk_tokens"), std::string::npos);
  FailureDecision bad = DecideOnFailure(FailureClass::kBadInput, 1, 3, "no such file", "");
  EXPECT_EQ(bad.next, S::kFailed);
  EXPECT_NE(bad.reason.find("bad input is not retried: fix the spec, data or model"),
            std::string::npos);
}

TEST(JobStateTest, DivergedIsNotRetriedAndStorageIs) {
  FailureDecision diverged =
      DecideOnFailure(FailureClass::kDiverged, 1, 3, "diverged at step 2", "runs/x/step-1");
  EXPECT_EQ(diverged.next, S::kFailed);
  EXPECT_NE(diverged.reason.find("a diverged run is not retried"), std::string::npos);
  EXPECT_NE(diverged.reason.find("resume_from"), std::string::npos);
  FailureDecision storage =
      DecideOnFailure(FailureClass::kStorage, 1, 3, "No space left on device", "runs/x/step-4");
  EXPECT_EQ(storage.next, S::kRetrying);
  EXPECT_NE(storage.reason.find("from checkpoint runs/x/step-4"), std::string::npos);
  EXPECT_TRUE(IsRetryable(FailureClass::kStorage));
  EXPECT_FALSE(IsRetryable(FailureClass::kDiverged));
  EXPECT_EQ(FailureClassName(FailureClass::kStorage), "STORAGE");
  EXPECT_EQ(*ParseFailureClass("DIVERGED"), FailureClass::kDiverged);
}

}  // namespace
}  // namespace sbp::server
