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

namespace sbp::server {
namespace {

// Preemption: a pending job that fits the cluster but not the idle workers
// asks running jobs of strictly lower priority to checkpoint and stop.

RunningJob Running(const std::string& id, int64_t seq, int priority,
                   std::vector<std::string> worker_ids, const std::string& preempted_by = "") {
  return RunningJob{id, seq, priority, std::move(worker_ids), preempted_by};
}

std::vector<std::string> VictimsOf(const ScheduleResult& r, const std::string& id) {
  for (const Preemption& p : r.preemptions) {
    if (p.job_id == id) return p.victim_ids;
  }
  return {};
}

const WaitingJob* WaitingOf(const ScheduleResult& r, const std::string& id) {
  for (const WaitingJob& w : r.waiting) {
    if (w.job_id == id) return &w;
  }
  return nullptr;
}

TEST(PreemptionTest, OnlyStrictlyLowerPriority) {
  const std::vector<SchedulerWorker> busy = {Worker("w1", false)};
  ScheduleResult r = Schedule({Job("urgent", 2, 1, 5)}, busy, {}, {Running("low", 1, 5, {"w1"})});
  EXPECT_TRUE(r.preemptions.empty());
  EXPECT_EQ(WaitingOf(r, "urgent")->cause, WaitCause::kWorkersBusy);

  r = Schedule({Job("urgent", 2, 1, 6)}, busy, {}, {Running("low", 1, 5, {"w1"})});
  EXPECT_EQ(VictimsOf(r, "urgent"), std::vector<std::string>{"low"});
  ASSERT_NE(WaitingOf(r, "urgent"), nullptr);
  EXPECT_EQ(WaitingOf(r, "urgent")->cause, WaitCause::kPreempting);
  EXPECT_EQ(ReasonOf(r, "urgent"),
            "needs 1 idle cpu worker; 0 idle (1 busy, 0 too small); preempting lower-priority "
            "job low (priority 5)");
}

TEST(PreemptionTest, NeverWhenIdleWorkersFit) {
  ScheduleResult r = Schedule({Job("urgent", 2, 1, 9)}, {Worker("w1", false), Worker("w2")}, {},
                              {Running("low", 1, 0, {"w1"})});
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_EQ(r.placements.size(), 1u);
  EXPECT_EQ(r.placements[0].worker_ids, std::vector<std::string>{"w2"});
}

TEST(PreemptionTest, NeverAcrossTheOwnersQuota) {
  // alice runs her quota's one worker: her urgent job waits on the quota
  // instead of preempting anyone (her own job or bob's).
  ScheduleLimits limits;
  limits.running_workers["alice"] = 1;
  limits.max_workers["alice"] = 1;
  SchedulerJob urgent = Job("urgent", 3, 1, 9);
  urgent.owner = "alice";
  ScheduleResult r = Schedule({urgent}, {Worker("w1", false), Worker("w2", false)}, limits,
                              {Running("hers", 1, 0, {"w1"}), Running("bobs", 2, 0, {"w2"})});
  EXPECT_TRUE(r.preemptions.empty());
  EXPECT_EQ(WaitingOf(r, "urgent")->cause, WaitCause::kQuota);

  // With room in her quota she may preempt a lower-priority job.
  limits.max_workers["alice"] = 2;
  r = Schedule({urgent}, {Worker("w1", false), Worker("w2", false)}, limits,
               {Running("hers", 1, 0, {"w1"}), Running("bobs", 2, 0, {"w2"})});
  EXPECT_EQ(r.preemptions.size(), 1u);
}

TEST(PreemptionTest, SmallestSetOfVictims) {
  const std::vector<SchedulerWorker> workers = {Worker("w1", false), Worker("w2", false),
                                                Worker("w3", false), Worker("w4", false)};
  const std::vector<RunningJob> running = {Running("pair", 1, 0, {"w1", "w2"}),
                                           Running("single", 2, 0, {"w3"}),
                                           Running("higher", 3, 1, {"w4"})};
  // Two workers: the one job that frees two, not two jobs of one.
  ScheduleResult r = Schedule({Job("gang", 4, 2, 5)}, workers, {}, running);
  EXPECT_EQ(VictimsOf(r, "gang"), std::vector<std::string>{"pair"});
  // One worker: one job, the lowest priority, the newest among equals.
  r = Schedule({Job("one", 4, 1, 5)}, workers, {}, running);
  EXPECT_EQ(VictimsOf(r, "one"), std::vector<std::string>{"single"});
  // Three workers: two jobs.
  r = Schedule({Job("three", 4, 3, 5)}, workers, {}, running);
  EXPECT_EQ(VictimsOf(r, "three"), (std::vector<std::string>{"single", "pair"}));
  // Five workers can never be freed: nothing is preempted.
  r = Schedule({Job("five", 4, 5, 5)}, workers, {}, running);
  EXPECT_TRUE(r.preemptions.empty());
  // Too little priority to preempt enough: nothing is preempted either.
  r = Schedule({Job("four", 4, 4, 1)}, workers, {}, running);
  EXPECT_TRUE(r.preemptions.empty());
}

TEST(PreemptionTest, OnlyWorkersThatFitCount) {
  // The small worker's job frees nothing a 9 GiB job could use.
  const std::vector<SchedulerWorker> workers = {Worker("small", false, 4 * kGiB),
                                                Worker("big", false, 16 * kGiB)};
  ScheduleResult r =
      Schedule({Job("big-job", 3, 1, 5, 9 * kGiB)}, workers, {},
               {Running("on-small", 2, 0, {"small"}), Running("on-big", 1, 1, {"big"})});
  EXPECT_EQ(VictimsOf(r, "big-job"), std::vector<std::string>{"on-big"});
}

TEST(PreemptionTest, PreemptionsOnTheirWayAreNotRepeated) {
  const std::vector<SchedulerWorker> workers = {Worker("w1", false)};
  const std::vector<RunningJob> running = {Running("low", 1, 0, {"w1"}, "urgent")};
  ScheduleResult r =
      Schedule({Job("urgent", 2, 1, 5), Job("other", 3, 1, 9)}, workers, {}, running);
  EXPECT_TRUE(r.preemptions.empty()) << "a job being preempted is not chosen again";
  EXPECT_EQ(WaitingOf(r, "urgent")->cause, WaitCause::kPreempting);
  EXPECT_NE(ReasonOf(r, "urgent").find("waiting for low to checkpoint and stop"), std::string::npos)
      << ReasonOf(r, "urgent");
  EXPECT_EQ(WaitingOf(r, "other")->cause, WaitCause::kWorkersBusy);
}

TEST(PreemptionTest, APreemptedJobSaysSoWhileItWaits) {
  SchedulerJob low = Job("low", 1, 1, 0);
  low.preempted_by = "urgent";
  ScheduleResult r = Schedule({low}, {Worker("w1", false)}, {}, {Running("urgent", 2, 5, {"w1"})});
  EXPECT_EQ(ReasonOf(r, "low"),
            "preempted by urgent; needs 1 idle cpu worker; 0 idle (1 busy, 0 too small)");
}

TEST(PreemptionTest, ChooseVictimsDirectly) {
  EXPECT_TRUE(ChooseVictims({{0, 1, 1}}, 0).empty());
  EXPECT_TRUE(ChooseVictims({{0, 1, 1}}, 2).empty());
  // Fewest first, then the lowest priority among sets of that size.
  EXPECT_EQ(ChooseVictims({{0, 1, 1}, {0, 2, 1}, {3, 3, 2}}, 2), std::vector<size_t>{2});
  EXPECT_EQ(ChooseVictims({{3, 1, 2}, {1, 2, 2}}, 2), std::vector<size_t>{1});
  EXPECT_EQ(ChooseVictims({{2, 1, 1}, {0, 2, 3}, {1, 3, 2}}, 4), (std::vector<size_t>{1, 2}));
}

}  // namespace
}  // namespace sbp::server
