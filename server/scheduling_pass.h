// One scheduling pass over a PendingIndex, with the semantics of Schedule()
// (server/scheduler.h) but costing what it changes: jobs are taken in
// scheduling order (priority, fair share among owners, FIFO) only until
// nothing more can happen in this pass, i.e. no idle worker fits any pending
// job's shape and no job left could preempt (its priority is not above any
// running job not yet being preempted). The jobs after that point are
// "settled": their waiting reasons depend only on the cluster state the pass
// leaves behind, their shape and their owner, and Waiting() gives them (one
// classification of the workers per shape, then O(1) per job), for callers
// that refresh stored reasons in batches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "server/pending_index.h"
#include "server/scheduler.h"

namespace sbp::server {

class SchedulingPass {
 public:
  // The arguments must outlive the pass.
  SchedulingPass(const std::vector<SchedulerWorker>& workers, const ScheduleLimits& limits,
                 const std::vector<RunningJob>& running);

  // Runs the pass over `pending`, leaving out the jobs in `excluded`. With
  // `exhaustive` every job ends up in the result (settled ones with
  // Waiting()), otherwise the pass stops at the first settled job.
  void Run(const PendingIndex& pending, const absl::flat_hash_set<std::string>& excluded,
           bool exhaustive = false);

  // Placements, preemptions, and the waiting jobs the pass reached.
  ScheduleResult& result() { return result_; }
  // Ids of the jobs the pass reached (placed or waiting).
  const absl::flat_hash_set<std::string>& reached() const { return reached_; }
  // Why `job`, pending and not reached by Run, waits after the pass.
  WaitingJob Waiting(const SchedulerJob& job);

 private:
  // How the workers stand for one shape of job.
  struct ShapeView {
    std::vector<size_t> candidates;    // idle fitting workers, smallest memory first
    std::vector<std::string> fitting;  // ids of the workers with enough memory
    int64_t on_device = 0, eligible = 0, busy = 0, held = 0, too_small = 0;
    std::string holder;  // the first job holding a fitting worker
    // The needs the reason names: those some worker of the device meets
    // (all when none does).
    std::vector<WorkerNeed> named;
  };
  ShapeView Classify(DeviceKind device, const std::vector<WorkerNeed>& needs) const;
  // The quota wait of `job`, if its owner's quota stops it.
  bool QuotaWait(const SchedulerJob& job, WaitingJob& out);
  // Places, holds or explains `job` (a job the pass reaches).
  void Take(const SchedulerJob& job);
  // Whether `job` and every later job are settled.
  bool Settled(const SchedulerJob& job) const;
  // A worker stops being free (placed or held).
  void Occupy(size_t worker);
  void NotePreempted(const std::string& running_id);
  void AddWaiting(WaitingJob waiting, const SchedulerJob& job);

  const std::vector<SchedulerWorker>& workers_;
  const ScheduleLimits& limits_;
  const std::vector<RunningJob>& running_;
  std::vector<size_t> order_;  // worker indexes, smallest memory first, stable
  std::vector<bool> free_;
  int64_t free_count_ = 0;
  absl::flat_hash_map<size_t, std::string> held_for_;  // worker index -> job holding it
  absl::flat_hash_map<std::string, size_t> worker_index_;
  absl::flat_hash_set<std::string> preempted_;  // running jobs asked to stop
  // The lowest priority among running jobs not being preempted: a job of
  // this priority or lower cannot preempt.
  int lowest_victim_priority_ = 0;
  bool any_victim_ = false;
  absl::flat_hash_map<std::string, int64_t> served_;  // workers by owner, placements included
  // Shapes of the pending jobs that idle workers fit, with how many idle
  // workers fit each (tracked when there are few shapes).
  bool shapes_tracked_ = false;
  absl::flat_hash_map<PendingIndex::Shape, int64_t> live_shapes_;
  // Settled state: classifications by shape.
  absl::flat_hash_map<PendingIndex::Shape, ShapeView> settled_views_;
  ScheduleResult result_;
  absl::flat_hash_set<std::string> reached_;
};

}  // namespace sbp::server
