// Admission at submit: the memory planner's requirement per worker for a job
// spec, and the check that some registered worker (device, memory, host
// memory, offload disk) can hold it. A job no registered worker of its device
// can hold is refused with RESOURCE_EXHAUSTED, the planner's numbers, the
// resource that is short and what would make it fit; a job that fits some
// workers is admitted with that requirement, and the scheduler then places
// it only on workers that have it.
//
// The memory tiers (worker/engine/planner.h): a job whose layer checkpoints
// live in host memory or on disk (`streambp.offload.checkpoints`), or whose
// optimizer state lives in host memory (`train.optimizer_offload`), needs
// host memory (and for `checkpoints: auto`'s disk tier, offload disk) beside
// device memory, each with the device's safety margin. `checkpoints: auto`
// runs in the fastest tier the worker it lands on fits (as the worker's
// trainer chooses it with PlanTiers), so such a job has one need per tier and
// a worker fits it when it meets any (server/worker_need.h). An explicit
// `checkpoints: disk` needs no offload disk figure: it is bounded by the disk
// itself on the worker. A worker that reports no host memory (0) offers none.
//
// The model's shape comes from config.json in the spec's model directory:
// absolute paths as they are, relative ones under the coordinator's work
// directory (as workers resolve them under theirs); or from a preset of that
// name. When neither is readable the job is admitted unplanned and the job's
// events say why.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/dtype.h"
#include "server/worker_need.h"
#include "worker/engine/planner.h"
#include "worker/train/job_paths.h"
#include "worker/train/job_plan.h"
#include "worker/train/job_spec.h"

namespace sbp::server {

// One checkpoint tier the job may run in, as planned.
struct TierOption {
  PlanRequest request;  // with its checkpoint_tier
  MemoryPlan minimum;   // the least memory it runs in
  WorkerNeed need;      // per worker, margins included
  // One of the job's needs: within resources.memory, and not asking for as
  // much of everything as a faster tier.
  bool needed = false;
};

struct AdmissionPlan {
  bool planned = false;               // the planner ran (the model's shape was found)
  int64_t required_memory_bytes = 0;  // per worker; 0: no requirement
  // Beside it: the memory tiers' host memory and offload disk (0: none),
  // and other ways a worker may hold the job (`checkpoints: auto`).
  int64_t required_host_memory_bytes = 0;
  int64_t required_offload_disk_bytes = 0;
  std::vector<WorkerNeed> alternative_needs;
  std::string note;     // for the job's events: the plan, or why there is none
  PlanRequest request;  // what was planned (when planned): the first tier tried
  MemoryPlan minimum;   // the least memory that tier runs in (when planned)
  double safety_margin = 0;
  // Every tier planned, fastest first (the spec's tier alone unless it says
  // `auto`), and the needs of those that are needed, in the same order, as
  // the scheduler compares them: device memory is resources.memory when the
  // spec sets it (empty when planned but no tier fits within it). Admission
  // compares the tiers' own needs.
  std::vector<TierOption> tiers;
  std::vector<WorkerNeed> needs;
  // A model file the spec names that is bad input (not a regular file, too
  // large, malformed): the job is refused at submit with it.
  absl::Status bad_input;
};

// Plans `spec`. Its model path resolves in the owner's area of `paths`
// (worker/train/job_paths.h; without a work directory only absolute paths and
// preset names are planned), and config.json is read only where the job
// itself may read: a link out of the area is refused before anything is
// opened (the refusal names only the path), and the read is confined on the
// opened descriptor too. Reads files; call without locks held.
AdmissionPlan PlanAdmission(const JobSpec& spec, const PathPolicy& paths);

struct WorkerCapacity {
  std::string id;
  DeviceKind device = DeviceKind::kCpu;
  int64_t memory_bytes = 0;
  int64_t host_memory_bytes = 0;   // 0: none offered
  int64_t offload_disk_bytes = 0;  // 0: none offered
};

// OK when the job is unplanned, when no worker of its device is registered
// (it waits for one), or when one of them meets one of its needs; else
// RESOURCE_EXHAUSTED with the planner's numbers, the short resource (device
// memory, host memory, offload disk) and suggestions. A spec that sets
// resources.memory below every tier's requirement is refused the same way.
absl::Status CheckAdmission(const JobSpec& spec, const AdmissionPlan& plan,
                            const std::vector<WorkerCapacity>& workers);

}  // namespace sbp::server
