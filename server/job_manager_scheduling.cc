// JobManager: the scheduler pass, lease expiry, stall detection and gauges.
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/job_manager.h"
#include "server/job_manager_internal.h"

namespace sbp::server {

using manager_internal::Seconds;

// ---------------------------------------------------------------------------
// Scheduling, leases, stalls.

ScheduleLimits JobManager::CurrentLimits() const {
  ScheduleLimits limits;
  for (const auto& [id, live] : live_) {
    limits.running_workers[live.owner] += static_cast<int64_t>(live.succeeded.size());
  }
  if (options_.identities == nullptr) return limits;
  for (const auto& [id, entry] : pending_) {
    const std::string& owner = entry.first.owner;
    if (limits.max_workers.contains(owner)) continue;
    const std::optional<Identity> identity = options_.identities->Find(owner);
    if (identity.has_value() && identity->quota.max_running_workers > 0) {
      limits.max_workers[owner] = identity->quota.max_running_workers;
    }
  }
  return limits;
}

void JobManager::RunScheduler() {
  const absl::Time now = absl::Now();
  last_schedule_ = now;
  if (pending_.empty()) return;
  std::vector<SchedulerJob> jobs;
  jobs.reserve(pending_.size());
  for (const auto& [id, entry] : pending_) {
    auto backoff = retry_after_.find(id);
    if (backoff != retry_after_.end()) {
      if (now < backoff->second) continue;  // still backing off; its reason says until when
      retry_after_.erase(backoff);
    }
    jobs.push_back(entry.first);
  }
  std::vector<const WorkerEntry*> live_workers;
  for (const auto& [id, w] : workers_) {
    if (!w.record.lost) live_workers.push_back(&w);
  }
  std::sort(live_workers.begin(), live_workers.end(),
            [](const WorkerEntry* a, const WorkerEntry* b) {
              if (a->record.registered_at != b->record.registered_at) {
                return a->record.registered_at < b->record.registered_at;
              }
              return a->record.id < b->record.id;
            });
  std::vector<SchedulerWorker> workers;
  for (const WorkerEntry* w : live_workers) {
    workers.push_back({w->record.id, w->record.device, w->record.memory_bytes,
                       w->confirmed && w->active.empty() && !w->finishing.has_value()});
  }
  ScheduleResult result = Schedule(std::move(jobs), workers, CurrentLimits(), RunningJobs());
  absl::flat_hash_map<WaitCause, int> causes;
  for (const WaitingJob& waiting : result.waiting) ++causes[waiting.cause];
  for (WaitCause cause : kAllWaitCauses) {
    metrics_->SetPendingCount(WaitCauseName(cause), causes.contains(cause) ? causes[cause] : 0);
  }

  for (const Placement& placement : result.placements) {
    absl::StatusOr<JobRecord> loaded = store_->GetJob(placement.job_id);
    if (!loaded.ok()) {
      LOG(ERROR) << "scheduling " << placement.job_id << ": " << loaded.status();
      continue;
    }
    JobRecord& job = *loaded;
    const JobState before = job.state;
    Change change;
    ++job.attempt;
    job.worker_ids = placement.worker_ids;
    job.preempted_by.clear();
    job.preempt_deadline = absl::UnixEpoch();
    job.progress.peak_bytes = 0;
    job.progress.current_bytes = 0;
    job.active_at = now;
    AddTransition(job, change, JobState::kScheduled,
                  absl::StrCat("attempt ", job.attempt, " scheduled on ",
                               absl::StrJoin(placement.worker_ids, ", ")));
    for (size_t rank = 0; rank < placement.worker_ids.size(); ++rank) {
      change.new_assignments.push_back(
          {job.id, job.attempt, static_cast<int>(rank), placement.worker_ids[rank], true, ""});
    }
    absl::Status saved = Save(job, before, std::move(change));
    if (!saved.ok()) {
      LOG(ERROR) << "scheduling " << job.id << ": " << saved;
      continue;
    }
    LOG(INFO) << "job " << job.id << " attempt " << job.attempt << " scheduled on "
              << absl::StrJoin(placement.worker_ids, ", ");
  }
  if (!result.placements.empty()) assigned_.SignalAll();
  StartPreemptions(result.preemptions);

  // Pending reasons: write only the ones that changed, in one transaction.
  std::vector<JobRecord> changed;
  for (const WaitingJob& waiting : result.waiting) {
    auto it = pending_.find(waiting.job_id);
    if (it == pending_.end() || it->second.second == waiting.reason) continue;
    absl::StatusOr<JobRecord> job = store_->GetJob(waiting.job_id);
    if (!job.ok()) continue;
    job->reason = waiting.reason;
    ++job->revision;
    job->updated_at = now;
    changed.push_back(std::move(*job));
  }
  if (changed.empty()) return;
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(sqlite::Transaction tx, store_->Begin());
    for (const JobRecord& job : changed) RETURN_IF_ERROR(store_->UpdateJob(job));
    return tx.Commit();
  }();
  if (!status.ok()) {
    LOG(ERROR) << "saving pending reasons: " << status;
    return;
  }
  for (const JobRecord& job : changed) {
    pending_[job.id].second = job.reason;
    hub_->Publish(job);
  }
}

absl::Status JobManager::MarkLost(WorkerEntry& worker, absl::string_view why) {
  worker.record.lost = true;
  worker.record.last_heartbeat = worker.last_seen;
  LOG(WARNING) << "worker " << worker.record.id << " lost: " << why;
  metrics_->RemoveWorker(worker.record.id);
  absl::Status status = store_->UpsertWorker(worker.record);
  const std::vector<AssignmentRecord> held = worker.active;
  for (const AssignmentRecord& a : held) {
    AssignmentRecord released = a;
    released.active = false;
    released.outcome = "LOST";
    if (!IsLive(a)) {
      status.Update(SaveAssignments({released}));
      continue;
    }
    absl::StatusOr<JobRecord> job = store_->GetJob(a.job_id);
    if (!job.ok()) {
      status.Update(job.status());
      continue;
    }
    const JobState before = job->state;
    Change change;
    change.updated_assignments.push_back(released);
    FailAttempt(*job, change, FailureClass::kLostWorker,
                absl::StrCat("worker ", worker.record.id, " (rank ", a.rank, ") lost: ", why));
    status.Update(Save(*job, before, std::move(change)));
  }
  worker.active.clear();
  UpdateWorkerCounts();
  return status;
}

void JobManager::Tick() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  bool changed = false;
  std::vector<std::string> expired;
  for (const auto& [id, w] : workers_) {
    if (!w.record.lost && now - w.last_seen > options_.lease) expired.push_back(id);
  }
  for (const std::string& id : expired) {
    WorkerEntry& w = workers_.find(id)->second;
    absl::Status status = MarkLost(w, absl::StrCat("no heartbeat for ", Seconds(now - w.last_seen),
                                                   " (lease ", Seconds(options_.lease), ")"));
    if (!status.ok()) LOG(ERROR) << "marking worker " << id << " lost: " << status;
    changed = true;
  }
  std::vector<std::string> stalled;
  for (const auto& [id, attempt] : live_) {
    if (now - attempt.active_at > options_.stall) stalled.push_back(id);
  }
  for (const std::string& id : stalled) {
    absl::StatusOr<JobRecord> job = store_->GetJob(id);
    if (!job.ok()) continue;
    const absl::Duration quiet = now - live_[id].active_at;
    const JobState before = job->state;
    Change change;
    FailAttempt(*job, change, FailureClass::kStalled,
                absl::StrCat("no progress for ", Seconds(quiet), " (--stall-seconds ",
                             absl::ToInt64Seconds(options_.stall), ")"));
    absl::Status status = Save(*job, before, std::move(change));
    if (!status.ok()) LOG(ERROR) << "failing stalled job " << id << ": " << status;
    LOG(WARNING) << "job " << id << " stalled: " << job->reason;
    changed = true;
  }
  if (ExpirePreemptions()) changed = true;
  if (changed || now - last_schedule_ >= options_.schedule_interval) RunScheduler();
  UpdateGauges();
}

void JobManager::UpdateWorkerCounts() {
  double idle = 0, busy = 0, lost = 0;
  for (const auto& [id, w] : workers_) {
    (w.record.lost ? lost : w.active.empty() && !w.finishing.has_value() ? idle : busy) += 1;
  }
  metrics_->SetWorkerCounts(idle, busy, lost);
}

void JobManager::UpdateGauges() {
  const absl::Time now = absl::Now();
  for (const auto& [id, w] : workers_) {
    if (!w.record.lost) metrics_->SetHeartbeatAge(id, absl::ToDoubleSeconds(now - w.last_seen));
  }
  UpdateWorkerCounts();
}

}  // namespace sbp::server
