// Gang scheduling as a pure function: pending jobs (highest priority first,
// then oldest first) get all `world_size` workers they need at once or none.
// A worker fits a job when its device matches and it meets one of the job's
// per-worker needs (server/worker_need.h): device memory, and for the memory
// tiers host memory and offload disk. A job that fits the cluster but not the idle
// workers holds the idle workers it could use, so later jobs cannot starve
// it; a job that can never fit the registered workers holds nothing. Every
// job left waiting gets a reason a user can act on. A job that fits the
// cluster but not the idle workers may preempt running jobs of strictly
// lower priority (server/preemption.h), never to get around its owner's
// quota.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "kernels/dtype.h"
#include "server/preemption.h"
#include "server/worker_need.h"

namespace sbp::server {

struct SchedulerJob {
  std::string id;
  int64_t seq = 0;  // creation order: FIFO among equal priorities
  int priority = 0;
  int world_size = 1;
  DeviceKind device = DeviceKind::kCpu;
  int64_t memory_bytes = 0;  // per worker; 0: any
  std::string owner;         // the identity that submitted it
  // The job that preempted it last ("" when none): its waiting reason says so.
  std::string preempted_by;
  // The memory tiers: host memory and offload disk it needs per worker
  // beside memory_bytes (0: none), and other ways a worker may hold it
  // (`checkpoints: auto`: other tiers, with other figures).
  int64_t host_memory_bytes = 0;
  int64_t offload_disk_bytes = 0;
  std::vector<WorkerNeed> alternatives;
};

// {memory_bytes, host_memory_bytes, offload_disk_bytes}, then the alternatives.
std::vector<WorkerNeed> JobNeeds(const SchedulerJob& job);

// What the users already hold and may hold (their quotas).
struct ScheduleLimits {
  absl::flat_hash_map<std::string, int64_t> running_workers;  // by owner, before this pass
  absl::flat_hash_map<std::string, int64_t> max_workers;      // by owner; absent: no limit
};

// A live worker; `idle` when it runs nothing and may take work now.
struct SchedulerWorker {
  std::string id;
  DeviceKind device = DeviceKind::kCpu;
  int64_t memory_bytes = 0;
  bool idle = false;
  // What it offers the memory tiers (0: none; server/worker_need.h).
  int64_t host_memory_bytes = 0;
  int64_t offload_disk_bytes = 0;
  WorkerOffer offer() const { return {memory_bytes, host_memory_bytes, offload_disk_bytes}; }
};

struct Placement {
  std::string job_id;
  std::vector<std::string> worker_ids;  // by rank
};

// Why a job waits, as a small fixed set (a metric label).
enum class WaitCause {
  kNoWorkers,      // no worker of its device is registered
  kTooFewFitting,  // fewer registered workers with enough memory (device, host, disk) than it needs
  kWorkersBusy,    // enough fitting workers, not enough of them idle
  kQuota,          // its owner already runs as many workers as their quota allows
  kPreempting,     // lower-priority jobs are checkpointing to free workers for it
};
inline constexpr WaitCause kAllWaitCauses[] = {WaitCause::kNoWorkers, WaitCause::kTooFewFitting,
                                               WaitCause::kWorkersBusy, WaitCause::kQuota,
                                               WaitCause::kPreempting};
// "no_workers", "too_few_fitting_workers", "workers_busy", "quota", "preempting".
const char* WaitCauseName(WaitCause cause);

struct WaitingJob {
  std::string job_id;
  WaitCause cause = WaitCause::kWorkersBusy;
  // "needs 2 idle cpu workers with >= 9.1 GiB; 1 idle (1 busy, 1 too small); fits: w1, w2";
  // a job with several needs names those some registered worker of its
  // device meets (all of them when none does): "with >= 9.1 GiB or >= 2.0
  // GiB and >= 300.0 GiB host memory".
  std::string reason;
};

struct ScheduleResult {
  std::vector<Placement> placements;    // in scheduling order
  std::vector<WaitingJob> waiting;      // in scheduling order
  std::vector<Preemption> preemptions;  // new ones only, in scheduling order
};

// Jobs go by priority; among equal priorities the owner holding the fewest
// workers goes first (fair share), each owner's jobs FIFO. A job whose owner
// would exceed their max_workers waits ("quota: alice runs 8 of 8 workers")
// without holding workers for itself. Workers are chosen smallest memory
// first (keeping large ones for large jobs), ties in the order given.
//
// A job within its quota that fits the cluster but finds too few idle
// workers may preempt `running` jobs of strictly lower priority whose
// workers it could use (ChooseVictims picks them); it then waits with cause
// kPreempting until they have checkpointed and stopped. A job that already
// has preemptions on its way preempts more only when those do not free
// enough workers; a job being preempted is never chosen again.
//
// This is one exhaustive SchedulingPass (server/scheduling_pass.h), which the
// coordinator runs incrementally over its PendingIndex.
ScheduleResult Schedule(std::vector<SchedulerJob> jobs, const std::vector<SchedulerWorker>& workers,
                        const ScheduleLimits& limits = {},
                        const std::vector<RunningJob>& running = {});

}  // namespace sbp::server
