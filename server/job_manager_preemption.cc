// JobManager: preemption. The scheduler picks victims (server/preemption.h);
// here they are asked to checkpoint and stop (persisted on the job row, so
// that a restarted coordinator carries on), their workers learn of it in
// heartbeat and progress answers, and once every rank has stopped, or the
// grace has run out, the job goes back to PENDING, "preempted by <job>".
// Preempted attempts are not restarts: max_restarts and
// sbp_job_restarts_total ignore them; sbp_job_preemptions_total counts them.
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/job_manager.h"
#include "server/job_manager_internal.h"

namespace sbp::server {

using manager_internal::Seconds;

std::vector<RunningJob> JobManager::RunningJobs() const {
  std::vector<RunningJob> out;
  out.reserve(live_.size());
  for (const auto& [id, live] : live_) {
    out.push_back({id, live.seq, live.priority, live.worker_ids, live.preempted_by});
  }
  return out;
}

void JobManager::SyncLive(const JobRecord& job) {
  auto it = live_.find(job.id);
  if (it == live_.end() || it->second.attempt != job.attempt) return;
  LiveAttempt& live = it->second;
  live.seq = job.seq;
  live.priority = job.priority;
  live.worker_ids = job.worker_ids;
  // The deadline follows the job only when a preemption starts or ends, so
  // that one extended at recovery (Load) stays extended.
  if (live.preempted_by != job.preempted_by) {
    live.preempted_by = job.preempted_by;
    live.preempt_deadline = job.preempt_deadline;
  }
  live.stopped.resize(job.world_size, false);
}

void JobManager::StartPreemptions(const std::vector<Preemption>& preemptions) {
  const absl::Time now = absl::Now();
  for (const Preemption& preemption : preemptions) {
    for (const std::string& victim : preemption.victim_ids) {
      auto live = live_.find(victim);
      if (live == live_.end() || !live->second.preempted_by.empty()) continue;
      absl::StatusOr<JobRecord> job = store_->GetJob(victim);
      if (!job.ok()) {
        LOG(ERROR) << "preempting " << victim << ": " << job.status();
        continue;
      }
      job->preempted_by = preemption.job_id;
      job->preempt_deadline = now + options_.preemption_grace;
      Change change;
      AddMessage(
          *job, change,
          absl::StrCat("preempted by higher-priority job ", preemption.job_id, ": attempt ",
                       job->attempt, " checkpoints at its next step boundary and stops (grace ",
                       Seconds(options_.preemption_grace), ")"));
      const absl::Status saved = Save(*job, job->state, std::move(change));
      if (!saved.ok()) {
        LOG(ERROR) << "preempting " << victim << ": " << saved;
        continue;
      }
      LOG(INFO) << "job " << victim << " attempt " << job->attempt << " preempted by "
                << preemption.job_id;
    }
  }
}

void JobManager::CompletePreemption(JobRecord& job, Change& change, absl::string_view how) {
  if (job.preempted_by.empty()) job.preempted_by = "a higher-priority job";
  ++job.preemptions;
  job.preempt_deadline = absl::UnixEpoch();
  job.worker_ids.clear();
  job.progress.current_bytes = 0;
  AddTransition(job, change, JobState::kPending,
                absl::StrCat("preempted by ", job.preempted_by, ": ", how,
                             " (not a restart; preemption ", job.preemptions, ")"));
  change.preempted = true;
}

bool JobManager::ExpirePreemptions() {
  const absl::Time now = absl::Now();
  std::vector<std::string> expired;
  for (const auto& [id, live] : live_) {
    if (!live.preempted_by.empty() && now >= live.preempt_deadline) expired.push_back(id);
  }
  for (const std::string& id : expired) {
    absl::StatusOr<JobRecord> job = store_->GetJob(id);
    if (!job.ok()) continue;
    const JobState before = job->state;
    Change change;
    CompletePreemption(
        *job, change,
        absl::StrCat("attempt ", job->attempt, " did not checkpoint within the ",
                     Seconds(options_.preemption_grace),
                     " grace (--preemption-grace) and was ended; it resumes from ",
                     job->last_checkpoint.empty()
                         ? std::string("its last checkpoint, if any")
                         : absl::StrCat("its last checkpoint ", job->last_checkpoint)));
    const absl::Status saved = Save(*job, before, std::move(change));
    if (!saved.ok()) LOG(ERROR) << "ending preempted job " << id << ": " << saved;
    LOG(WARNING) << "job " << id << ": " << job->reason;
  }
  return !expired.empty();
}

}  // namespace sbp::server
