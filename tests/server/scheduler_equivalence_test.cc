// Schedule() and the incremental SchedulingPass against the reference
// scheduler (the plain full pass) on random clusters: the same placements,
// preemptions and waiting reasons, also for the jobs an early-stopping pass
// leaves settled and explains afterwards. Some workers offer host memory and
// offload disk to the memory tiers, and some jobs need them, or have several
// needs (`checkpoints: auto`).
#include <gtest/gtest.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "server/pending_index.h"
#include "server/scheduler.h"
#include "server/scheduling_pass.h"
#include "tests/server/reference_scheduler.h"

namespace sbp::server {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

struct Cluster {
  std::vector<SchedulerJob> jobs;
  std::vector<SchedulerWorker> workers;
  ScheduleLimits limits;
  std::vector<RunningJob> running;
};

Cluster RandomCluster(std::mt19937& rng) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const int64_t memories[] = {0, 8 * kGiB, 16 * kGiB, 40 * kGiB, 80 * kGiB};
  const char* owners[] = {"alice", "bob", "carol"};
  Cluster c;
  const int n_workers = pick(12);
  for (int i = 0; i < n_workers; ++i) {
    c.workers.push_back({absl::StrCat("w", i), pick(4) == 0 ? DeviceKind::kCuda : DeviceKind::kCpu,
                         memories[1 + pick(4)], pick(3) != 0});
    if (pick(2) == 0) c.workers.back().host_memory_bytes = memories[1 + pick(4)] * 4;
    if (pick(3) == 0) c.workers.back().offload_disk_bytes = memories[1 + pick(4)] * 8;
  }
  // Running jobs on the busy workers, one or two workers each.
  std::vector<std::string> busy;
  for (const SchedulerWorker& w : c.workers) {
    if (!w.idle) busy.push_back(w.id);
  }
  const int n_jobs = pick(30);
  for (size_t i = 0; i < busy.size();) {
    RunningJob r{absl::StrCat("r", i), 1000 + pick(100), pick(4), {}, ""};
    const size_t take = std::min(busy.size() - i, static_cast<size_t>(1 + pick(2)));
    for (size_t k = 0; k < take; ++k) r.worker_ids.push_back(busy[i + k]);
    if (pick(8) == 0) r.worker_ids.push_back("gone");  // a lost worker
    i += take;
    if (n_jobs > 0 && pick(5) == 0) r.preempted_by = absl::StrCat("j", pick(n_jobs));
    c.running.push_back(std::move(r));
  }
  for (int i = 0; i < n_jobs; ++i) {
    SchedulerJob job;
    job.id = absl::StrCat("j", i);
    job.seq = pick(3) == 0 ? pick(5) : i;  // some equal seqs: ties keep arrival order
    job.priority = pick(4);
    job.world_size = 1 + pick(3);
    job.device = pick(5) == 0 ? DeviceKind::kCuda : DeviceKind::kCpu;
    job.memory_bytes = memories[pick(5)];
    job.owner = owners[pick(3)];
    if (pick(6) == 0) job.preempted_by = "r0";
    if (pick(4) == 0) job.host_memory_bytes = memories[1 + pick(4)] * 4;
    if (pick(4) == 0) {
      // `checkpoints: auto`: a host tier and perhaps a disk tier, each with less device memory.
      job.alternatives.push_back({memories[pick(5)] / 2, memories[1 + pick(4)] * 4, 0});
      if (pick(2) == 0) {
        job.alternatives.push_back(
            {memories[pick(5)] / 4, memories[pick(5)], memories[1 + pick(4)] * 8});
      }
    }
    c.jobs.push_back(std::move(job));
  }
  for (const char* owner : owners) {
    if (pick(3) == 0) c.limits.max_workers[owner] = 1 + pick(4);
    if (pick(2) == 0) c.limits.running_workers[owner] = pick(4);
  }
  return c;
}

void ExpectSame(const ScheduleResult& got, const ScheduleResult& want, const std::string& what) {
  ASSERT_EQ(got.placements.size(), want.placements.size()) << what;
  for (size_t i = 0; i < want.placements.size(); ++i) {
    EXPECT_EQ(got.placements[i].job_id, want.placements[i].job_id) << what;
    EXPECT_EQ(got.placements[i].worker_ids, want.placements[i].worker_ids) << what;
  }
  ASSERT_EQ(got.preemptions.size(), want.preemptions.size()) << what;
  for (size_t i = 0; i < want.preemptions.size(); ++i) {
    EXPECT_EQ(got.preemptions[i].job_id, want.preemptions[i].job_id) << what;
    EXPECT_EQ(got.preemptions[i].victim_ids, want.preemptions[i].victim_ids) << what;
  }
}

TEST(SchedulerEquivalenceTest, ScheduleEqualsReferenceOnRandomClusters) {
  std::mt19937 rng(20);
  for (int round = 0; round < 3000; ++round) {
    const Cluster c = RandomCluster(rng);
    const std::string what = absl::StrCat("round ", round);
    const ScheduleResult want = ReferenceSchedule(c.jobs, c.workers, c.limits, c.running);
    const ScheduleResult got = Schedule(c.jobs, c.workers, c.limits, c.running);
    ExpectSame(got, want, what);
    ASSERT_EQ(got.waiting.size(), want.waiting.size()) << what;
    for (size_t i = 0; i < want.waiting.size(); ++i) {
      EXPECT_EQ(got.waiting[i].job_id, want.waiting[i].job_id) << what;
      EXPECT_EQ(got.waiting[i].cause, want.waiting[i].cause) << what;
      EXPECT_EQ(got.waiting[i].reason, want.waiting[i].reason) << what;
    }
    if (HasFailure()) return;
  }
}

TEST(SchedulerEquivalenceTest, EarlyStoppingPassExplainsSettledJobsLikeTheReference) {
  std::mt19937 rng(21);
  int stopped_early = 0;
  for (int round = 0; round < 3000; ++round) {
    const Cluster c = RandomCluster(rng);
    const std::string what = absl::StrCat("round ", round);
    const ScheduleResult want = ReferenceSchedule(c.jobs, c.workers, c.limits, c.running);
    PendingIndex pending;
    for (const SchedulerJob& job : c.jobs) pending.Add(job, "");
    SchedulingPass pass(c.workers, c.limits, c.running);
    pass.Run(pending, {});
    ExpectSame(pass.result(), want, what);
    absl::flat_hash_map<std::string, WaitingJob> got;
    for (const WaitingJob& w : pass.result().waiting) got[w.job_id] = w;
    if (pass.reached().size() < c.jobs.size()) ++stopped_early;
    for (const SchedulerJob& job : c.jobs) {
      if (!pass.reached().contains(job.id)) got[job.id] = pass.Waiting(job);
    }
    ASSERT_EQ(got.size(), want.waiting.size()) << what;
    for (const WaitingJob& w : want.waiting) {
      ASSERT_TRUE(got.contains(w.job_id)) << what << " " << w.job_id;
      EXPECT_EQ(got[w.job_id].cause, w.cause) << what << " " << w.job_id;
      EXPECT_EQ(got[w.job_id].reason, w.reason) << what << " " << w.job_id;
    }
    if (HasFailure()) return;
  }
  EXPECT_GT(stopped_early, 500);  // the early stop is exercised
}

TEST(SchedulerEquivalenceTest, ExcludedJobsAreLeftOut) {
  PendingIndex pending;
  pending.Add({"a", 1}, "");
  pending.Add({"b", 2}, "");
  const std::vector<SchedulerWorker> workers = {{"w1", DeviceKind::kCpu, kGiB, true}};
  const ScheduleLimits limits;
  const std::vector<RunningJob> running;
  SchedulingPass pass(workers, limits, running);
  pass.Run(pending, {"a"});
  ASSERT_EQ(pass.result().placements.size(), 1u);
  EXPECT_EQ(pass.result().placements[0].job_id, "b");
  EXPECT_FALSE(pass.reached().contains("a"));
}

TEST(PendingIndexTest, CountsByOwnerShapeAndCause) {
  PendingIndex index;
  SchedulerJob a{"a", 1, 0, 1, DeviceKind::kCpu, kGiB, "alice"};
  SchedulerJob b{"b", 2, 5, 2, DeviceKind::kCpu, kGiB, "alice"};
  SchedulerJob c{"c", 3, 0, 1, DeviceKind::kCuda, 0, "bob"};
  EXPECT_TRUE(index.Add(a, "submitted"));
  EXPECT_FALSE(index.Add(a, "again"));
  index.Add(b, "");
  index.Add(c, "");
  EXPECT_EQ(index.size(), 3u);
  EXPECT_EQ(index.CountOf("alice"), 2);
  EXPECT_EQ(index.shapes().size(), 2u);
  EXPECT_EQ(index.levels().begin()->first, 5);  // highest priority first
  index.SetReason(*index.Find("a"), "quota", WaitCause::kQuota);
  index.SetReason(*index.Find("c"), "no workers", WaitCause::kNoWorkers);
  EXPECT_EQ(index.CountWith(WaitCause::kQuota), 1);
  index.SetReason(*index.Find("a"), "busy", WaitCause::kWorkersBusy);
  EXPECT_EQ(index.CountWith(WaitCause::kQuota), 0);
  index.Remove("a");
  index.Remove("c");
  EXPECT_EQ(index.CountOf("alice"), 1);
  EXPECT_EQ(index.CountWith(WaitCause::kWorkersBusy), 0);
  EXPECT_EQ(index.CountWith(WaitCause::kNoWorkers), 0);
  EXPECT_EQ(index.shapes().size(), 1u);
  EXPECT_EQ(index.levels().size(), 1u);
  EXPECT_EQ(index.Find("a"), nullptr);
}

}  // namespace
}  // namespace sbp::server
