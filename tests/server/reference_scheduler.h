// The reference scheduler (see reference_scheduler.cc).
#pragma once

#include <vector>

#include "server/scheduler.h"

namespace sbp::server {

ScheduleResult ReferenceSchedule(std::vector<SchedulerJob> jobs,
                                 const std::vector<SchedulerWorker>& workers,
                                 const ScheduleLimits& limits = {},
                                 const std::vector<RunningJob>& running = {});

}  // namespace sbp::server
