#include "server/scheduler.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace sbp::server {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

SchedulerJob Job(const std::string& id, int64_t seq, int world_size = 1, int priority = 0,
                 int64_t memory = 0, DeviceKind device = DeviceKind::kCpu) {
  return SchedulerJob{id, seq, priority, world_size, device, memory};
}

SchedulerWorker Worker(const std::string& id, bool idle = true, int64_t memory = 16 * kGiB,
                       DeviceKind device = DeviceKind::kCpu) {
  return SchedulerWorker{id, device, memory, idle};
}

std::string ReasonOf(const ScheduleResult& r, const std::string& id) {
  for (const WaitingJob& w : r.waiting) {
    if (w.job_id == id) return w.reason;
  }
  return "<placed or unknown>";
}

TEST(SchedulerTest, GangIsAllOrNone) {
  ScheduleResult r = Schedule({Job("big", 1, 2)}, {Worker("w1"), Worker("w2", false)});
  EXPECT_TRUE(r.placements.empty());
  EXPECT_EQ(ReasonOf(r, "big"), "needs 2 idle cpu workers; 1 idle (1 busy, 0 too small)");

  r = Schedule({Job("big", 1, 2)}, {Worker("w1"), Worker("w2")});
  ASSERT_EQ(r.placements.size(), 1u);
  EXPECT_EQ(r.placements[0].worker_ids, (std::vector<std::string>{"w1", "w2"}));
  EXPECT_TRUE(r.waiting.empty());
}

TEST(SchedulerTest, PriorityThenFifo) {
  ScheduleResult r = Schedule({Job("old", 1), Job("new", 2), Job("urgent", 3, 1, 5)},
                              {Worker("w1"), Worker("w2")});
  ASSERT_EQ(r.placements.size(), 2u);
  EXPECT_EQ(r.placements[0].job_id, "urgent");
  EXPECT_EQ(r.placements[1].job_id, "old");
  EXPECT_EQ(ReasonOf(r, "new"), "needs 1 idle cpu worker; 0 idle (2 busy, 0 too small)");
}

TEST(SchedulerTest, EarlierJobHoldsIdleWorkersItCanUse) {
  // "gang" fits the cluster but not now: the idle worker waits for it, so
  // the later small job cannot starve it.
  ScheduleResult r =
      Schedule({Job("gang", 1, 2), Job("small", 2)}, {Worker("w1"), Worker("w2", false)});
  EXPECT_TRUE(r.placements.empty());
  EXPECT_EQ(ReasonOf(r, "gang"), "needs 2 idle cpu workers; 1 idle (1 busy, 0 too small)");
  EXPECT_EQ(ReasonOf(r, "small"),
            "needs 1 idle cpu worker; 0 idle (1 busy, 0 too small, 1 held for earlier job gang)");
}

TEST(SchedulerTest, JobThatCanNeverFitHoldsNothing) {
  ScheduleResult r = Schedule({Job("huge", 1, 4), Job("small", 2)}, {Worker("w1"), Worker("w2")});
  ASSERT_EQ(r.placements.size(), 1u);
  EXPECT_EQ(r.placements[0].job_id, "small");
  EXPECT_EQ(ReasonOf(r, "huge"),
            "needs 4 cpu workers but only 2 are registered; waiting for workers to join");
}

TEST(SchedulerTest, MemoryFiltering) {
  const int64_t need = 9771876352;  // 9.1 GiB
  ScheduleResult r = Schedule({Job("j", 1, 2, 0, need)},
                              {Worker("small", true, 8 * kGiB), Worker("big1", true, 10 * kGiB),
                               Worker("big2", false, 10 * kGiB)});
  EXPECT_TRUE(r.placements.empty());
  EXPECT_EQ(ReasonOf(r, "j"),
            "needs 2 idle cpu workers with >= 9.1 GiB; 1 idle (1 busy, 1 too small); "
            "fits: big1, big2");

  r = Schedule({Job("j", 1, 2, 0, need)},
               {Worker("small", true, 8 * kGiB), Worker("big1", true, 10 * kGiB)});
  EXPECT_EQ(ReasonOf(r, "j"),
            "needs 2 cpu workers with >= 9.1 GiB but only 1 of 2 registered cpu workers have "
            "enough memory; fits: big1; waiting for workers to join");

  // Smallest sufficient workers first; large ones stay for large jobs.
  r = Schedule({Job("j", 1, 1, 0, 4 * kGiB)},
               {Worker("huge", true, 64 * kGiB), Worker("fits", true, 8 * kGiB),
                Worker("tiny", true, 2 * kGiB)});
  ASSERT_EQ(r.placements.size(), 1u);
  EXPECT_EQ(r.placements[0].worker_ids, std::vector<std::string>{"fits"});
}

TEST(SchedulerTest, DeviceFiltering) {
  ScheduleResult r =
      Schedule({Job("gpu", 1, 1, 0, 0, DeviceKind::kCuda), Job("cpu", 2)}, {Worker("c1")});
  ASSERT_EQ(r.placements.size(), 1u);
  EXPECT_EQ(r.placements[0].job_id, "cpu");
  EXPECT_EQ(ReasonOf(r, "gpu"), "no cuda workers registered");

  r = Schedule({Job("gpu", 1, 1, 0, 0, DeviceKind::kCuda)},
               {Worker("g1", true, 80 * kGiB, DeviceKind::kCuda), Worker("c1")});
  ASSERT_EQ(r.placements.size(), 1u);
  EXPECT_EQ(r.placements[0].worker_ids, std::vector<std::string>{"g1"});

  r = Schedule({Job("cpu", 1)}, {});
  EXPECT_EQ(ReasonOf(r, "cpu"), "no cpu workers registered");
}

TEST(SchedulerTest, ManyJobsFillTheClusterInOrder) {
  std::vector<SchedulerJob> jobs;
  for (int i = 0; i < 5; ++i) jobs.push_back(Job(absl::StrCat("j", i), i, 2));
  ScheduleResult r =
      Schedule(jobs, {Worker("a"), Worker("b"), Worker("c"), Worker("d"), Worker("e")});
  ASSERT_EQ(r.placements.size(), 2u);
  EXPECT_EQ(r.placements[0].job_id, "j0");
  EXPECT_EQ(r.placements[1].job_id, "j1");
  EXPECT_EQ(ReasonOf(r, "j2"), "needs 2 idle cpu workers; 1 idle (4 busy, 0 too small)");
  EXPECT_EQ(ReasonOf(r, "j3"),
            "needs 2 idle cpu workers; 0 idle (4 busy, 0 too small, 1 held for earlier job j2)");
}

}  // namespace
}  // namespace sbp::server

namespace sbp::server {
namespace {

// The cause a waiting job gets (the label of sbp_jobs_pending).
TEST(SchedulerTest, WaitCauses) {
  const ScheduleResult r = Schedule({Job("busy", 1, 2), Job("huge", 2, 1, 0, 64 * kGiB),
                                     Job("gpu", 3, 1, 0, 0, DeviceKind::kCuda)},
                                    {Worker("w1"), Worker("w2", false)});
  ASSERT_EQ(r.waiting.size(), 3u);
  for (const WaitingJob& w : r.waiting) {
    const WaitCause expected = w.job_id == "busy"   ? WaitCause::kWorkersBusy
                               : w.job_id == "huge" ? WaitCause::kTooFewFitting
                                                    : WaitCause::kNoWorkers;
    EXPECT_EQ(WaitCauseName(w.cause), std::string(WaitCauseName(expected))) << w.job_id;
  }
}

}  // namespace
}  // namespace sbp::server
