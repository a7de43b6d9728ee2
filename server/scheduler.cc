#include "server/scheduler.h"

#include <utility>

#include "server/pending_index.h"
#include "server/scheduling_pass.h"

namespace sbp::server {

const char* WaitCauseName(WaitCause cause) {
  switch (cause) {
    case WaitCause::kNoWorkers:
      return "no_workers";
    case WaitCause::kTooFewFitting:
      return "too_few_fitting_workers";
    case WaitCause::kWorkersBusy:
      return "workers_busy";
    case WaitCause::kQuota:
      return "quota";
    case WaitCause::kPreempting:
      return "preempting";
  }
  return "unknown";
}

std::vector<WorkerNeed> JobNeeds(const SchedulerJob& job) {
  std::vector<WorkerNeed> needs = {
      {job.memory_bytes, job.host_memory_bytes, job.offload_disk_bytes}};
  needs.insert(needs.end(), job.alternatives.begin(), job.alternatives.end());
  return needs;
}

ScheduleResult Schedule(std::vector<SchedulerJob> jobs, const std::vector<SchedulerWorker>& workers,
                        const ScheduleLimits& limits, const std::vector<RunningJob>& running) {
  PendingIndex pending;
  for (const SchedulerJob& job : jobs) pending.Add(job, "");
  SchedulingPass pass(workers, limits, running);
  pass.Run(pending, {}, /*exhaustive=*/true);
  return std::move(pass.result());
}

}  // namespace sbp::server
