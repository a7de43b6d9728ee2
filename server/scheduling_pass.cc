#include "server/scheduling_pass.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "server/records.h"

namespace sbp::server {
namespace {

// Beyond this many distinct shapes pending, the pass only stops early once
// no worker at all is idle.
constexpr size_t kMaxTrackedShapes = 64;

std::string Workers(int64_t n) { return n == 1 ? "worker" : "workers"; }
std::string Jobs(size_t n) { return n == 1 ? "job" : "jobs"; }

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

bool Fits(const SchedulerWorker& w, DeviceKind device, const std::vector<WorkerNeed>& needs) {
  return w.device == device && MeetsAny(w.offer(), needs);
}

// How many of `r`'s workers a job of `device` and `needs` could use.
int64_t FittingWorkers(const RunningJob& r, DeviceKind device, const std::vector<WorkerNeed>& needs,
                       const std::vector<SchedulerWorker>& workers,
                       const absl::flat_hash_map<std::string, size_t>& worker_index) {
  int64_t n = 0;
  for (const std::string& id : r.worker_ids) {
    auto it = worker_index.find(id);
    if (it == worker_index.end()) continue;  // lost: frees nothing
    n += Fits(workers[it->second], device, needs);
  }
  return n;
}

// "; waiting for a, b to checkpoint and stop (preempted for this job)".
std::string OnTheWayClause(const std::vector<std::string>& on_the_way) {
  return absl::StrCat("; waiting for ", absl::StrJoin(on_the_way, ", "),
                      " to checkpoint and stop (preempted for this job)");
}

}  // namespace

SchedulingPass::SchedulingPass(const std::vector<SchedulerWorker>& workers,
                               const ScheduleLimits& limits, const std::vector<RunningJob>& running)
    : workers_(workers), limits_(limits), running_(running), served_(limits.running_workers) {
  order_.resize(workers.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
  std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
    return workers[a].memory_bytes < workers[b].memory_bytes;
  });
  free_.resize(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) {
    free_[i] = workers[i].idle;
    free_count_ += workers[i].idle;
    worker_index_[workers[i].id] = i;
  }
  for (const RunningJob& r : running) {
    if (!r.preempted_by.empty()) preempted_.insert(r.id);
  }
  NotePreempted("");
}

void SchedulingPass::NotePreempted(const std::string& running_id) {
  if (!running_id.empty()) preempted_.insert(running_id);
  any_victim_ = false;
  lowest_victim_priority_ = std::numeric_limits<int>::max();
  for (const RunningJob& r : running_) {
    if (preempted_.contains(r.id)) continue;
    any_victim_ = true;
    lowest_victim_priority_ = std::min(lowest_victim_priority_, r.priority);
  }
}

void SchedulingPass::Occupy(size_t worker) {
  free_[worker] = false;
  --free_count_;
  if (!shapes_tracked_) return;
  const SchedulerWorker& w = workers_[worker];
  std::vector<PendingIndex::Shape> dead;
  for (auto& [shape, idle] : live_shapes_) {
    if (Fits(w, shape.first, shape.second) && --idle == 0) dead.push_back(shape);
  }
  for (const PendingIndex::Shape& shape : dead) live_shapes_.erase(shape);
}

bool SchedulingPass::Settled(const SchedulerJob& job) const {
  const bool nothing_fits = free_count_ == 0 || (shapes_tracked_ && live_shapes_.empty());
  return nothing_fits && (!any_victim_ || job.priority <= lowest_victim_priority_);
}

SchedulingPass::ShapeView SchedulingPass::Classify(DeviceKind device,
                                                   const std::vector<WorkerNeed>& needs) const {
  ShapeView view;
  std::vector<bool> met(needs.size(), false);
  for (size_t i : order_) {
    const SchedulerWorker& w = workers_[i];
    if (w.device != device) continue;
    ++view.on_device;
    bool fits = needs.empty();
    for (size_t n = 0; n < needs.size(); ++n) {
      if (Meets(w.offer(), needs[n])) fits = met[n] = true;
    }
    if (!fits) {
      ++view.too_small;
      continue;
    }
    ++view.eligible;
    view.fitting.push_back(w.id);
    if (free_[i]) {
      view.candidates.push_back(i);
    } else if (auto it = held_for_.find(i); it != held_for_.end()) {
      ++view.held;
      if (view.holder.empty()) view.holder = it->second;
    } else {
      ++view.busy;
    }
  }
  // The needs the registered workers meet, or all when they meet none.
  for (size_t n = 0; n < needs.size(); ++n) {
    if (met[n] || view.eligible == 0) view.named.push_back(needs[n]);
  }
  return view;
}

bool SchedulingPass::QuotaWait(const SchedulerJob& job, WaitingJob& out) {
  auto quota = limits_.max_workers.find(job.owner);
  if (quota == limits_.max_workers.end()) return false;
  auto it = served_.find(job.owner);
  const int64_t held = it == served_.end() ? 0 : it->second;
  if (held + job.world_size <= quota->second) return false;
  out = {job.id, WaitCause::kQuota,
         absl::StrCat("quota: ", job.owner, " runs ", held, " of ", quota->second, " ",
                      Workers(quota->second),
                      held < quota->second ? absl::StrCat(" and this job needs ", job.world_size)
                                           : std::string())};
  return true;
}

namespace {

// The reason of a job that does not get workers now, but for preemption;
// kWorkersBusy when it fits the cluster.
WaitingJob WaitReason(const SchedulerJob& job, int64_t idle, int64_t on_device, int64_t eligible,
                      int64_t busy, int64_t held, int64_t too_small, const std::string& holder,
                      const std::vector<std::string>& fitting,
                      const std::vector<WorkerNeed>& named) {
  const std::string device(DeviceKindName(job.device));
  const int64_t need = job.world_size;
  const std::string clause = NeedsClause(named);
  WaitingJob out{job.id, WaitCause::kWorkersBusy, ""};
  if (on_device == 0) {
    out.cause = WaitCause::kNoWorkers;
    out.reason = absl::StrCat("no ", device, " workers registered");
  } else if (eligible < need) {
    out.cause = WaitCause::kTooFewFitting;
    // It can never fit the workers registered now; more may join.
    out.reason =
        absl::StrCat("needs ", need, " ", device, " ", Workers(need), clause, " but only ");
    if (!clause.empty()) {
      absl::StrAppend(&out.reason, eligible, " of ", on_device, " registered ", device,
                      " workers have enough memory", FitsClause(fitting, too_small));
    } else {
      absl::StrAppend(&out.reason, on_device, " ", on_device == 1 ? "is" : "are", " registered");
    }
    absl::StrAppend(&out.reason, "; waiting for workers to join");
  } else {
    out.reason = absl::StrCat("needs ", need, " idle ", device, " ", Workers(need), clause, "; ",
                              idle, " idle (", busy, " busy, ", too_small, " too small");
    if (held > 0) absl::StrAppend(&out.reason, ", ", held, " held for earlier job ", holder);
    absl::StrAppend(&out.reason, ")", FitsClause(fitting, too_small));
  }
  return out;
}

}  // namespace

void SchedulingPass::AddWaiting(WaitingJob waiting, const SchedulerJob& job) {
  // A job that lost its workers to a preemption says so while it waits.
  if (!job.preempted_by.empty()) {
    waiting.reason = absl::StrCat("preempted by ", job.preempted_by, "; ", waiting.reason);
  }
  result_.waiting.push_back(std::move(waiting));
}

void SchedulingPass::Take(const SchedulerJob& job) {
  reached_.insert(job.id);
  WaitingJob waiting;
  if (QuotaWait(job, waiting)) {
    AddWaiting(std::move(waiting), job);
    return;
  }
  const std::vector<WorkerNeed> needs = JobNeeds(job);
  const ShapeView view = Classify(job.device, needs);
  const int64_t need = job.world_size;
  const int64_t idle = static_cast<int64_t>(view.candidates.size());
  if (idle >= need) {
    Placement placement{job.id, {}};
    for (int64_t r = 0; r < need; ++r) {
      Occupy(view.candidates[r]);
      placement.worker_ids.push_back(workers_[view.candidates[r]].id);
    }
    result_.placements.push_back(std::move(placement));
    served_[job.owner] += need;
    return;
  }
  waiting = WaitReason(job, idle, view.on_device, view.eligible, view.busy, view.held,
                       view.too_small, view.holder, view.fitting, view.named);
  if (view.on_device > 0 && view.eligible >= need) {
    // Workers already being freed for it and, when those are too few,
    // running jobs of strictly lower priority asked to stop.
    std::vector<std::string> on_the_way;
    int64_t freeing = 0;
    std::vector<VictimCandidate> candidates;
    std::vector<const RunningJob*> candidate_jobs;
    for (const RunningJob& r : running_) {
      if (r.preempted_by == job.id) {
        on_the_way.push_back(r.id);
        freeing += FittingWorkers(r, job.device, needs, workers_, worker_index_);
        continue;
      }
      if (preempted_.contains(r.id) || r.priority >= job.priority) continue;
      const int64_t fitting = FittingWorkers(r, job.device, needs, workers_, worker_index_);
      if (fitting == 0) continue;
      candidates.push_back({r.priority, r.seq, fitting});
      candidate_jobs.push_back(&r);
    }
    const std::vector<size_t> chosen = ChooseVictims(candidates, need - idle - freeing);
    if (!on_the_way.empty()) absl::StrAppend(&waiting.reason, OnTheWayClause(on_the_way));
    if (!chosen.empty()) {
      Preemption preemption{job.id, {}};
      std::vector<std::string> named;
      for (size_t i : chosen) {
        const RunningJob& victim = *candidate_jobs[i];
        preemption.victim_ids.push_back(victim.id);
        named.push_back(absl::StrCat(victim.id, " (priority ", victim.priority, ")"));
        NotePreempted(victim.id);
      }
      absl::StrAppend(&waiting.reason, "; preempting lower-priority ", Jobs(named.size()), " ",
                      absl::StrJoin(named, ", "));
      result_.preemptions.push_back(std::move(preemption));
    }
    if (!chosen.empty() || !on_the_way.empty()) waiting.cause = WaitCause::kPreempting;
    // The job fits the cluster: keep the idle workers it could use for it.
    for (size_t i : view.candidates) {
      Occupy(i);
      held_for_[i] = job.id;
    }
  }
  AddWaiting(std::move(waiting), job);
}

WaitingJob SchedulingPass::Waiting(const SchedulerJob& job) {
  WaitingJob waiting;
  if (!QuotaWait(job, waiting)) {
    PendingIndex::Shape shape(job.device, JobNeeds(job));
    auto view = settled_views_.find(shape);
    if (view == settled_views_.end()) {
      ShapeView classified = Classify(shape.first, shape.second);
      view = settled_views_.emplace(std::move(shape), std::move(classified)).first;
    }
    const ShapeView& v = view->second;
    const int64_t idle = static_cast<int64_t>(v.candidates.size());
    waiting = WaitReason(job, idle, v.on_device, v.eligible, v.busy, v.held, v.too_small, v.holder,
                         v.fitting, v.named);
    if (v.on_device > 0 && v.eligible >= job.world_size) {
      // Settled: no idle worker fits and no running job is a candidate
      // victim, so only preemptions already under way for it can count.
      std::vector<std::string> on_the_way;
      for (const RunningJob& r : running_) {
        if (r.preempted_by == job.id) on_the_way.push_back(r.id);
      }
      if (!on_the_way.empty()) {
        absl::StrAppend(&waiting.reason, OnTheWayClause(on_the_way));
        waiting.cause = WaitCause::kPreempting;
      }
    }
  }
  if (!job.preempted_by.empty()) {
    waiting.reason = absl::StrCat("preempted by ", job.preempted_by, "; ", waiting.reason);
  }
  return waiting;
}

void SchedulingPass::Run(const PendingIndex& pending,
                         const absl::flat_hash_set<std::string>& excluded, bool exhaustive) {
  if (pending.shapes().size() <= kMaxTrackedShapes) {
    shapes_tracked_ = true;
    for (const auto& [shape, count] : pending.shapes()) {
      int64_t idle = 0;
      for (size_t i = 0; i < workers_.size(); ++i) {
        idle += free_[i] && Fits(workers_[i], shape.first, shape.second);
      }
      if (idle > 0) live_shapes_[shape] = idle;
    }
  }
  // Fair share: within a priority the owner that holds (or has been given in
  // this order) the fewest workers goes next, each owner's jobs FIFO.
  absl::flat_hash_map<std::string, int64_t> order_served = limits_.running_workers;
  bool settled = false;
  for (const auto& [priority, level] : pending.levels()) {
    struct Cursor {
      PendingIndex::OwnerQueue::const_iterator it, end;
    };
    std::vector<Cursor> cursors;
    // (workers served, seq of the owner's next job, owner, cursor), least served first.
    using Next = std::tuple<int64_t, int64_t, std::string, size_t>;
    std::priority_queue<Next, std::vector<Next>, std::greater<>> next;
    auto advance = [&](size_t c) {
      Cursor& cursor = cursors[c];
      while (cursor.it != cursor.end && excluded.contains(cursor.it->second->job.id)) ++cursor.it;
      if (cursor.it == cursor.end) return;
      const SchedulerJob& job = cursor.it->second->job;
      next.emplace(order_served[job.owner], job.seq, job.owner, c);
    };
    for (const auto& [owner, queue] : level) {
      cursors.push_back({queue.begin(), queue.end()});
      advance(cursors.size() - 1);
    }
    while (!next.empty()) {
      const size_t c = std::get<3>(next.top());
      next.pop();
      const SchedulerJob& job = cursors[c].it->second->job;
      if (!settled && Settled(job)) {
        settled = true;
        if (!exhaustive) return;
      }
      if (settled) {
        reached_.insert(job.id);
        result_.waiting.push_back(Waiting(job));
      } else {
        Take(job);
      }
      order_served[job.owner] += job.world_size;
      ++cursors[c].it;
      advance(c);
    }
  }
}

}  // namespace sbp::server
