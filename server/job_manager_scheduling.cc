// JobManager: the scheduler pass, lease expiry, stall detection and gauges.
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/job_manager.h"
#include "server/job_manager_internal.h"
#include "server/scheduling_pass.h"

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
  for (const std::string& owner : pending_.Owners()) {
    const std::optional<Identity> identity = options_.identities->Find(owner);
    if (identity.has_value() && identity->quota.max_running_workers > 0) {
      limits.max_workers[owner] = identity->quota.max_running_workers;
    }
  }
  return limits;
}

void JobManager::RunScheduler(size_t refresh_batch) {
  const absl::Time now = absl::Now();
  last_schedule_ = now;
  // Jobs backing off after a storage failure sit the pass out; their reason
  // says until when. One whose backoff is over gets a reason again.
  absl::flat_hash_set<std::string> excluded;
  for (auto it = retry_after_.begin(); it != retry_after_.end();) {
    if (now < it->second) {
      excluded.insert(it->first);
      ++it;
    } else {
      unexplained_.insert(it->first);
      retry_after_.erase(it++);
    }
  }
  if (pending_.empty()) {
    UpdatePendingCounts();
    return;
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
  workers.reserve(live_workers.size());
  for (const WorkerEntry* w : live_workers) {
    workers.push_back({w->record.id, w->record.device, w->record.memory_bytes,
                       w->confirmed && w->active.empty() && !w->finishing.has_value(),
                       w->record.host_memory_bytes, w->record.offload_disk_bytes});
  }
  const ScheduleLimits limits = CurrentLimits();
  const std::vector<RunningJob> running = RunningJobs();
  const absl::Time pass_start = absl::Now();
  SchedulingPass pass(workers, limits, running);
  pass.Run(pending_, excluded);
  metrics_->ObserveSchedulingPass(absl::ToDoubleSeconds(absl::Now() - pass_start));
  ScheduleResult& result = pass.result();

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

  // Reasons: of the jobs the pass reached, of the jobs not explained yet,
  // and of the next stretch of the walk over all pending jobs.
  absl::flat_hash_set<std::string> considered;
  auto consider = [&](PendingIndex::Entry* entry, WaitingJob waiting) {
    if (entry == nullptr || !considered.insert(waiting.job_id).second) return;
    if (entry->reason != waiting.reason) unwritten_.insert(waiting.job_id);
    pending_.SetReason(*entry, std::move(waiting.reason), waiting.cause);
  };
  for (WaitingJob& waiting : result.waiting) {
    PendingIndex::Entry* entry = pending_.Find(waiting.job_id);
    consider(entry, std::move(waiting));
  }
  for (const std::string& id : unexplained_) {
    if (excluded.contains(id) || pass.reached().contains(id)) continue;
    PendingIndex::Entry* entry = pending_.Find(id);
    if (entry != nullptr) consider(entry, pass.Waiting(entry->job));
  }
  unexplained_.clear();
  // Someone is looking at these: their reasons follow every pass, whatever
  // the length of the queue the walk below goes through.
  for (const std::string& id : hub_->WatchedJobs()) {
    if (excluded.contains(id) || pass.reached().contains(id)) continue;
    PendingIndex::Entry* entry = pending_.Find(id);
    if (entry != nullptr) consider(entry, pass.Waiting(entry->job));
  }
  const auto& fifo = pending_.fifo();
  auto it = fifo.lower_bound(reasons_from_);
  for (size_t walked = 0; walked < std::min(refresh_batch, fifo.size()); ++walked) {
    if (it == fifo.end()) it = fifo.begin();
    PendingIndex::Entry* entry = it->second;
    ++it;
    if (excluded.contains(entry->job.id) || pass.reached().contains(entry->job.id)) continue;
    consider(entry, pass.Waiting(entry->job));
  }
  reasons_from_ = it != fifo.end() ? it->first : std::pair<int64_t, uint64_t>{0, 0};
  UpdatePendingCounts();
}

void JobManager::WriteReasons(size_t max) {
  if (unwritten_.empty()) return;
  const absl::Time now = absl::Now();
  // Watched jobs first (their watchers are waiting for the new version),
  // then any others.
  std::vector<std::string> ids;
  for (std::string& id : hub_->WatchedJobs()) {
    if (ids.size() >= max) break;
    if (unwritten_.contains(id)) ids.push_back(std::move(id));
  }
  const size_t watched = ids.size();
  for (const std::string& id : unwritten_) {
    if (ids.size() >= max) break;
    if (std::find(ids.begin(), ids.begin() + watched, id) == ids.begin() + watched) {
      ids.push_back(id);
    }
  }
  std::vector<JobRecord> jobs;
  jobs.reserve(ids.size());
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(sqlite::Transaction tx, store_->Begin());
    for (const std::string& id : ids) {
      const PendingIndex::Entry* entry = pending_.Find(id);
      if (entry == nullptr) continue;
      RETURN_IF_ERROR(store_->UpdateJobReason(id, entry->reason, now));
      if (hub_->watched(id)) {  // watchers get the new version
        ASSIGN_OR_RETURN(JobRecord job, store_->GetJob(id));
        jobs.push_back(std::move(job));
      }
    }
    return tx.Commit();
  }();
  if (!status.ok()) {
    LOG(ERROR) << "saving pending reasons: " << status;
    return;
  }
  for (const std::string& id : ids) unwritten_.erase(id);
  for (const JobRecord& job : jobs) hub_->Publish(job);
}

void JobManager::ShowReason(JobRecord& job) const {
  if (job.state != JobState::kPending) return;
  if (const PendingIndex::Entry* entry = pending_.Find(job.id); entry != nullptr) {
    job.reason = entry->reason;
  }
}

void JobManager::UpdatePendingCounts() {
  for (WaitCause cause : kAllWaitCauses) {
    metrics_->SetPendingCount(WaitCauseName(cause), static_cast<double>(pending_.CountWith(cause)));
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
  ApplyRetention(now);
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
  SaveHeartbeats(now);
  if (changed || now - last_schedule_ >= options_.schedule_interval) {
    RunScheduler(kTimerReasonBatch);
  }
  WriteReasons(kReasonWritesPerTick);
  UpdateGauges();
}

void JobManager::SaveHeartbeats(absl::Time now) {
  std::vector<WorkerEntry*> due;
  for (auto& [id, w] : workers_) {
    if (!w.record.lost && w.confirmed && w.last_seen > w.record.last_heartbeat &&
        now - w.record.last_heartbeat > options_.lease / 2) {
      due.push_back(&w);
    }
  }
  if (due.empty()) return;
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(sqlite::Transaction tx, store_->Begin());
    for (WorkerEntry* w : due) {
      WorkerRecord record = w->record;
      record.last_heartbeat = w->last_seen;
      RETURN_IF_ERROR(store_->UpsertWorker(record));
    }
    return tx.Commit();
  }();
  if (!status.ok()) {
    LOG(WARNING) << "saving heartbeats: " << status;
    return;
  }
  for (WorkerEntry* w : due) w->record.last_heartbeat = w->last_seen;
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
