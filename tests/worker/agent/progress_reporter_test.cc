#include "worker/agent/progress_reporter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace sbp {
namespace {

streambp::v1::JobProgress Step(int64_t step) {
  streambp::v1::JobProgress p;
  p.set_step(step);
  return p;
}

// Records what was sent; fails the first `failures` sends with UNAVAILABLE.
struct Recorder {
  absl::Mutex mu;
  std::vector<ProgressUpdate> sent;
  int failures = 0;
  int calls = 0;
  bool cancel_from_step3 = false;
  absl::StatusOr<bool> Send(const ProgressUpdate& u) {
    absl::MutexLock lock(&mu);
    ++calls;
    if (failures > 0) {
      --failures;
      return absl::UnavailableError("coordinator down");
    }
    sent.push_back(u);
    return cancel_from_step3 && u.progress && u.progress->step() >= 3;
  }
};

TEST(ProgressReporterTest, DeliversLatestProgressCheckpointsAndMessages) {
  Recorder rec;
  ProgressReporter reporter([&](const ProgressUpdate& u) { return rec.Send(u); });
  reporter.PostMessage("started");
  reporter.PostProgress(Step(1));
  reporter.PostCheckpoint("run/checkpoints/step-00000001");
  reporter.PostProgress(Step(2));
  ASSERT_TRUE(reporter.Flush(absl::Seconds(10)));
  absl::MutexLock lock(&rec.mu);
  ASSERT_FALSE(rec.sent.empty());
  EXPECT_EQ(rec.sent.back().progress->step(), 2);
  int checkpoints = 0, messages = 0;
  for (const ProgressUpdate& u : rec.sent) {
    checkpoints += !u.checkpoint.empty();
    messages += !u.message.empty();
  }
  EXPECT_EQ(checkpoints, 1);
  EXPECT_EQ(messages, 1);
  EXPECT_FALSE(reporter.cancel_requested());
}

TEST(ProgressReporterTest, RetriesUntilTheCoordinatorIsBack) {
  Recorder rec;
  rec.failures = 3;
  ProgressReporter reporter([&](const ProgressUpdate& u) { return rec.Send(u); });
  reporter.PostCheckpoint("ckpt-5");
  reporter.PostProgress(Step(5));
  ASSERT_TRUE(reporter.Flush(absl::Seconds(20)));
  absl::MutexLock lock(&rec.mu);
  EXPECT_EQ(rec.calls, 4);
  ASSERT_EQ(rec.sent.size(), 1u);
  EXPECT_EQ(rec.sent[0].checkpoint, "ckpt-5");
  EXPECT_EQ(rec.sent[0].progress->step(), 5);
}

TEST(ProgressReporterTest, RemembersCancellation) {
  Recorder rec;
  rec.cancel_from_step3 = true;
  ProgressReporter reporter([&](const ProgressUpdate& u) { return rec.Send(u); });
  reporter.PostProgress(Step(1));
  ASSERT_TRUE(reporter.Flush(absl::Seconds(10)));
  EXPECT_FALSE(reporter.cancel_requested());
  reporter.PostProgress(Step(3));
  ASSERT_TRUE(reporter.Flush(absl::Seconds(10)));
  EXPECT_TRUE(reporter.cancel_requested());
}

TEST(ProgressReporterTest, AbortedEndsReporting) {
  std::atomic<int> calls{0};
  ProgressReporter reporter([&](const ProgressUpdate&) -> absl::StatusOr<bool> {
    ++calls;
    return absl::AbortedError("attempt 1 is stale (job is on attempt 2)");
  });
  reporter.PostProgress(Step(1));
  EXPECT_FALSE(reporter.Flush(absl::Seconds(10)));
  EXPECT_TRUE(reporter.aborted());
  reporter.PostProgress(Step(2));
  EXPECT_FALSE(reporter.Flush(absl::Milliseconds(300)));
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace sbp
