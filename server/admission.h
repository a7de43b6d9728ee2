// Admission at submit: the memory planner's requirement per worker for a job
// spec, and the check that some registered worker class (device, memory) can
// hold it. A job no registered worker of its device can hold is refused with
// RESOURCE_EXHAUSTED, the planner's numbers and what would make it fit; a job
// that fits some workers is admitted with that requirement, and the scheduler
// then places it only on workers that have it.
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
#include "worker/engine/planner.h"
#include "worker/train/job_paths.h"
#include "worker/train/job_plan.h"
#include "worker/train/job_spec.h"

namespace sbp::server {

struct AdmissionPlan {
  bool planned = false;               // the planner ran (the model's shape was found)
  int64_t required_memory_bytes = 0;  // per worker; 0: no requirement
  std::string note;                   // for the job's events: the plan, or why there is none
  PlanRequest request;                // what was planned (when planned)
  MemoryPlan minimum;                 // the least memory the job runs in (when planned)
  double safety_margin = 0;
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
};

// OK when the job is unplanned, when no worker of its device is registered
// (it waits for one), or when one of them has the required memory; else
// RESOURCE_EXHAUSTED with the planner's numbers and suggestions. A spec that
// sets resources.memory below the requirement is refused the same way.
absl::Status CheckAdmission(const JobSpec& spec, const AdmissionPlan& plan,
                            const std::vector<WorkerCapacity>& workers);

}  // namespace sbp::server
