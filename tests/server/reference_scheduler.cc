// The scheduler as it was written before scheduling became incremental: a
// plain pass over every pending job, sorted, with every worker looked at for
// every job. Kept as the specification that Schedule() and SchedulingPass
// are compared against on random clusters (scheduler_equivalence_test.cc).
#include "tests/server/reference_scheduler.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <queue>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/records.h"

namespace sbp::server {
namespace {

std::string Workers(int64_t n) { return n == 1 ? "worker" : "workers"; }

// Whether `w` meets one of `job`'s needs (device memory, host memory,
// offload disk; server/worker_need.h): one need per way to run the job.
bool MeetsJob(const SchedulerWorker& w, const SchedulerJob& job) {
  const WorkerOffer offer{w.memory_bytes, w.host_memory_bytes, w.offload_disk_bytes};
  if (Meets(offer, {job.memory_bytes, job.host_memory_bytes, job.offload_disk_bytes})) return true;
  for (const WorkerNeed& need : job.alternatives) {
    if (Meets(offer, need)) return true;
  }
  return false;
}

// "; fits: w1, w2" naming the workers with enough memory (at most kNamed),
// when the memory requirement rules some out.
constexpr size_t kNamed = 5;
std::string FitsClause(const std::vector<std::string>& fitting, int64_t too_small) {
  if (too_small == 0 || fitting.empty()) return "";
  std::vector<std::string> named(fitting.begin(),
                                 fitting.begin() + std::min(fitting.size(), kNamed));
  std::string clause = absl::StrCat("; fits: ", absl::StrJoin(named, ", "));
  if (fitting.size() > kNamed) absl::StrAppend(&clause, " and ", fitting.size() - kNamed, " more");
  return clause;
}

// `jobs` (by priority, then FIFO) reordered so that within each priority the
// owner that holds the fewest workers comes next, each owner's jobs in FIFO
// order. Counts the workers each pick would take, so that a busy owner's
// later jobs fall behind others' (a job that ends up waiting costs little:
// the order only breaks ties). O(n log owners).
std::vector<SchedulerJob> FairShareOrder(std::vector<SchedulerJob> jobs,
                                         absl::flat_hash_map<std::string, int64_t> served) {
  std::vector<SchedulerJob> out;
  out.reserve(jobs.size());
  size_t begin = 0;
  while (begin < jobs.size()) {
    size_t end = begin;
    while (end < jobs.size() && jobs[end].priority == jobs[begin].priority) ++end;
    // Each owner's queue (FIFO) at this priority.
    absl::flat_hash_map<std::string, std::deque<size_t>> queues;
    for (size_t i = begin; i < end; ++i) queues[jobs[i].owner].push_back(i);
    // (workers served, seq of the owner's next job, owner), least served first.
    using Entry = std::tuple<int64_t, int64_t, std::string>;
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> next;
    for (auto& [owner, queue] : queues) next.emplace(served[owner], jobs[queue.front()].seq, owner);
    while (!next.empty()) {
      const std::string owner = std::get<2>(next.top());
      next.pop();
      std::deque<size_t>& queue = queues[owner];
      const size_t i = queue.front();
      queue.pop_front();
      served[owner] += jobs[i].world_size;
      out.push_back(std::move(jobs[i]));
      if (!queue.empty()) next.emplace(served[owner], jobs[queue.front()].seq, owner);
    }
    begin = end;
  }
  return out;
}

std::string Jobs(size_t n) { return n == 1 ? "job" : "jobs"; }

// How many of `r`'s workers `job` could use.
int64_t FittingWorkers(const RunningJob& r, const SchedulerJob& job,
                       const std::vector<SchedulerWorker>& workers,
                       const absl::flat_hash_map<std::string, size_t>& worker_index) {
  int64_t n = 0;
  for (const std::string& id : r.worker_ids) {
    auto it = worker_index.find(id);
    if (it == worker_index.end()) continue;  // lost: frees nothing
    const SchedulerWorker& w = workers[it->second];
    n += w.device == job.device && MeetsJob(w, job);
  }
  return n;
}

// For `job`, which finds `idle` of the workers it needs idle: counts the
// workers already being freed for it and, when those are too few, asks
// running jobs of strictly lower priority to stop (adding to `result` and
// `preempted`). Returns whether the job waits on preemptions, with
// `reason` extended to say which.
bool Preempt(const SchedulerJob& job, int64_t idle, const std::vector<SchedulerWorker>& workers,
             const absl::flat_hash_map<std::string, size_t>& worker_index,
             const std::vector<RunningJob>& running, absl::flat_hash_set<std::string>& preempted,
             ScheduleResult& result, std::string& reason) {
  std::vector<std::string> on_the_way;
  int64_t freeing = 0;
  std::vector<VictimCandidate> candidates;
  std::vector<const RunningJob*> candidate_jobs;
  for (const RunningJob& r : running) {
    if (r.preempted_by == job.id) {
      on_the_way.push_back(r.id);
      freeing += FittingWorkers(r, job, workers, worker_index);
      continue;
    }
    if (preempted.contains(r.id) || r.priority >= job.priority) continue;
    const int64_t fitting = FittingWorkers(r, job, workers, worker_index);
    if (fitting == 0) continue;
    candidates.push_back({r.priority, r.seq, fitting});
    candidate_jobs.push_back(&r);
  }
  const std::vector<size_t> chosen = ChooseVictims(candidates, job.world_size - idle - freeing);
  if (chosen.empty() && on_the_way.empty()) return false;
  if (!on_the_way.empty()) {
    absl::StrAppend(&reason, "; waiting for ", absl::StrJoin(on_the_way, ", "),
                    " to checkpoint and stop (preempted for this job)");
  }
  if (!chosen.empty()) {
    Preemption preemption{job.id, {}};
    std::vector<std::string> named;
    for (size_t i : chosen) {
      const RunningJob& victim = *candidate_jobs[i];
      preemption.victim_ids.push_back(victim.id);
      named.push_back(absl::StrCat(victim.id, " (priority ", victim.priority, ")"));
      preempted.insert(victim.id);
    }
    absl::StrAppend(&reason, "; preempting lower-priority ", Jobs(named.size()), " ",
                    absl::StrJoin(named, ", "));
    result.preemptions.push_back(std::move(preemption));
  }
  return true;
}

}  // namespace

ScheduleResult ReferenceSchedule(std::vector<SchedulerJob> jobs,
                                 const std::vector<SchedulerWorker>& workers,
                                 const ScheduleLimits& limits,
                                 const std::vector<RunningJob>& running) {
  std::stable_sort(jobs.begin(), jobs.end(), [](const SchedulerJob& a, const SchedulerJob& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.seq < b.seq;
  });
  absl::flat_hash_map<std::string, int64_t> served = limits.running_workers;
  jobs = FairShareOrder(std::move(jobs), served);
  // Worker indexes, smallest memory first, stable in the given order.
  std::vector<size_t> order(workers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return workers[a].memory_bytes < workers[b].memory_bytes;
  });
  std::vector<bool> free(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) free[i] = workers[i].idle;
  absl::flat_hash_map<size_t, std::string> held_for;  // worker index -> job holding it
  absl::flat_hash_map<std::string, size_t> worker_index;
  for (size_t i = 0; i < workers.size(); ++i) worker_index[workers[i].id] = i;
  // Running jobs already asked to stop (before or in this pass).
  absl::flat_hash_set<std::string> preempted;
  for (const RunningJob& r : running) {
    if (!r.preempted_by.empty()) preempted.insert(r.id);
  }

  absl::flat_hash_map<std::string, std::string> preempted_by;
  for (const SchedulerJob& job : jobs) {
    if (!job.preempted_by.empty()) preempted_by[job.id] = job.preempted_by;
  }

  ScheduleResult result;
  for (const SchedulerJob& job : jobs) {
    const std::string device(DeviceKindName(job.device));
    if (auto quota = limits.max_workers.find(job.owner); quota != limits.max_workers.end()) {
      const int64_t held = served[job.owner];
      if (held + job.world_size > quota->second) {
        result.waiting.push_back(
            {job.id, WaitCause::kQuota,
             absl::StrCat("quota: ", job.owner, " runs ", held, " of ", quota->second, " ",
                          Workers(quota->second),
                          held < quota->second
                              ? absl::StrCat(" and this job needs ", job.world_size)
                              : std::string())});
        continue;
      }
    }
    std::vector<size_t> candidates;
    std::vector<std::string> fitting;  // ids of the workers with enough memory
    int64_t on_device = 0, eligible = 0, busy = 0, held = 0, too_small = 0;
    std::string holder;
    for (size_t i : order) {
      const SchedulerWorker& w = workers[i];
      if (w.device != job.device) continue;
      ++on_device;
      if (!MeetsJob(w, job)) {
        ++too_small;
        continue;
      }
      ++eligible;
      fitting.push_back(w.id);
      if (free[i]) {
        candidates.push_back(i);
      } else if (auto it = held_for.find(i); it != held_for.end()) {
        ++held;
        if (holder.empty()) holder = it->second;
      } else {
        ++busy;
      }
    }
    // The reason names the needs some worker of the device meets (all of
    // them when none does).
    std::vector<WorkerNeed> named;
    {
      std::vector<WorkerNeed> all = {
          {job.memory_bytes, job.host_memory_bytes, job.offload_disk_bytes}};
      all.insert(all.end(), job.alternatives.begin(), job.alternatives.end());
      for (const WorkerNeed& n : all) {
        bool met = false;
        for (const SchedulerWorker& w : workers) {
          met = met || (w.device == job.device &&
                        Meets({w.memory_bytes, w.host_memory_bytes, w.offload_disk_bytes}, n));
        }
        if (met || eligible == 0) named.push_back(n);
      }
    }
    const std::string clause = NeedsClause(named);
    const int64_t need = job.world_size;
    if (static_cast<int64_t>(candidates.size()) >= need) {
      Placement placement{job.id, {}};
      for (int64_t r = 0; r < need; ++r) {
        free[candidates[r]] = false;
        placement.worker_ids.push_back(workers[candidates[r]].id);
      }
      result.placements.push_back(std::move(placement));
      served[job.owner] += need;
      continue;
    }
    std::string reason;
    WaitCause cause = WaitCause::kWorkersBusy;
    if (on_device == 0) {
      cause = WaitCause::kNoWorkers;
      reason = absl::StrCat("no ", device, " workers registered");
    } else if (eligible < need) {
      cause = WaitCause::kTooFewFitting;
      // It can never fit the workers registered now; more may join.
      reason = absl::StrCat("needs ", need, " ", device, " ", Workers(need), clause, " but only ");
      if (!clause.empty()) {
        absl::StrAppend(&reason, eligible, " of ", on_device, " registered ", device,
                        " workers have enough memory", FitsClause(fitting, too_small));
      } else {
        absl::StrAppend(&reason, on_device, " ", on_device == 1 ? "is" : "are", " registered");
      }
      absl::StrAppend(&reason, "; waiting for workers to join");
    } else {
      reason = absl::StrCat("needs ", need, " idle ", device, " ", Workers(need), clause, "; ",
                            candidates.size(), " idle (", busy, " busy, ", too_small, " too small");
      if (held > 0) absl::StrAppend(&reason, ", ", held, " held for earlier job ", holder);
      absl::StrAppend(&reason, ")", FitsClause(fitting, too_small));
      if (Preempt(job, static_cast<int64_t>(candidates.size()), workers, worker_index, running,
                  preempted, result, reason)) {
        cause = WaitCause::kPreempting;
      }
      // The job fits the cluster: keep the idle workers it could use for it.
      for (size_t i : candidates) {
        free[i] = false;
        held_for[i] = job.id;
      }
    }
    result.waiting.push_back({job.id, cause, std::move(reason)});
  }
  // A job that lost its workers to a preemption says so while it waits.
  for (WaitingJob& waiting : result.waiting) {
    if (auto by = preempted_by.find(waiting.job_id); by != preempted_by.end()) {
      waiting.reason = absl::StrCat("preempted by ", by->second, "; ", waiting.reason);
    }
  }
  return result;
}

}  // namespace sbp::server
