// JobManager: construction and recovery, committing changes, ids.
#include "server/job_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/job_manager_internal.h"

namespace sbp::server {

using manager_internal::Scope;
using manager_internal::ToSchedulerJob;
using manager_internal::ValidId;

// ---------------------------------------------------------------------------
// Construction and recovery.

JobManager::JobManager(Store* store, Metrics* metrics, WatchHub* hub, RendezvousStore* rendezvous,
                       const JobManagerOptions& options)
    : store_(store), metrics_(metrics), hub_(hub), rendezvous_(rendezvous), options_(options) {}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(Store* store, Metrics* metrics,
                                                               WatchHub* hub,
                                                               RendezvousStore* rendezvous,
                                                               const JobManagerOptions& options) {
  std::unique_ptr<JobManager> manager(new JobManager(store, metrics, hub, rendezvous, options));
  absl::MutexLock lock(&manager->mu_);
  RETURN_IF_ERROR(Annotate(manager->Load(), "recovering coordinator state"));
  manager->RunScheduler();
  manager->UpdateGauges();
  return manager;
}

absl::Status JobManager::Load() {
  const absl::Time now = absl::Now();
  ASSIGN_OR_RETURN(counts_, store_->CountJobsByState());
  ASSIGN_OR_RETURN(const auto spec_bytes, store_->SpecBytesByOwner());
  spec_bytes_by_owner_.insert(spec_bytes.begin(), spec_bytes.end());
  for (JobState state : kAllJobStates) metrics_->SetJobCount(state, counts_[state]);

  // Workers get two leases from now to call in again: their channels may
  // still be backing off from the outage, and a worker that has not written
  // since (it stops writing when its own lease lapses) loses nothing by
  // waiting.
  ASSIGN_OR_RETURN(std::vector<WorkerRecord> workers, store_->ListWorkers());
  for (WorkerRecord& record : workers) {
    WorkerEntry entry;
    entry.record = std::move(record);
    entry.last_seen = now + options_.lease;
    entry.confirmed = false;
    workers_.emplace(entry.record.id, std::move(entry));
  }

  ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, store_->ActiveJobs());
  for (const JobRecord& job : jobs) {
    if (job.state == JobState::kPending) {
      if (pending_.Add(ToSchedulerJob(job), job.reason)) unexplained_.insert(job.id);
    } else if (job.state == JobState::kScheduled || job.state == JobState::kRunning) {
      LiveAttempt live;
      live.attempt = job.attempt;
      live.owner = job.owner;
      live.active_at = now;
      live.succeeded.assign(job.world_size, false);
      live.current_bytes.assign(job.world_size, 0);
      live.stopped.assign(job.world_size, false);
      ASSIGN_OR_RETURN(std::vector<AssignmentRecord> ranks,
                       store_->Assignments(job.id, job.attempt));
      for (const AssignmentRecord& a : ranks) {
        if (a.rank < 0 || a.rank >= job.world_size) continue;
        if (a.outcome == "SUCCEEDED") live.succeeded[a.rank] = true;
        if (a.outcome == "PREEMPTED") live.stopped[a.rank] = true;
      }
      live_.emplace(job.id, std::move(live));
      SyncLive(job);
      // A preemption under way goes on; its workers get a lease to call in
      // again before the grace may end it.
      if (!job.preempted_by.empty()) {
        live_[job.id].preempt_deadline = std::max(job.preempt_deadline, now + options_.lease);
      }
      rendezvous_->OpenScope(Scope(job.id, job.attempt));
    }
  }

  ASSIGN_OR_RETURN(std::vector<AssignmentRecord> active, store_->ActiveAssignments());
  std::vector<AssignmentRecord> orphans;
  for (AssignmentRecord& a : active) {
    auto it = workers_.find(a.worker_id);
    if (it == workers_.end() || it->second.record.lost) {
      a.active = false;
      a.outcome = "LOST";
      orphans.push_back(std::move(a));
    } else {
      it->second.active.push_back(std::move(a));
    }
  }
  RETURN_IF_ERROR(SaveAssignments(orphans));

  for (JobRecord job : jobs) {
    if (job.state == JobState::kRetrying) {
      Change change;
      AddTransition(job, change, JobState::kPending,
                    "coordinator restarted; waiting to be rescheduled");
      RETURN_IF_ERROR(Save(job, JobState::kRetrying, std::move(change)));
      continue;
    }
    auto live = live_.find(job.id);
    if (live == live_.end()) continue;
    // Every rank that has not finished must be held by a worker we know.
    std::string missing;
    for (int rank = 0; rank < job.world_size && missing.empty(); ++rank) {
      if (live->second.succeeded[rank]) continue;
      const std::string worker =
          rank < static_cast<int>(job.worker_ids.size()) ? job.worker_ids[rank] : "";
      auto w = workers_.find(worker);
      const bool held =
          w != workers_.end() && std::any_of(w->second.active.begin(), w->second.active.end(),
                                             [&](const AssignmentRecord& a) {
                                               return a.job_id == job.id &&
                                                      a.attempt == job.attempt && a.rank == rank;
                                             });
      if (!held)
        missing = absl::StrCat("worker ", worker.empty() ? "?" : worker, " (rank ", rank, ")");
    }
    if (missing.empty()) continue;
    const JobState before = job.state;
    Change change;
    FailAttempt(job, change, FailureClass::kLostWorker,
                absl::StrCat(missing, " was gone when the coordinator restarted"));
    RETURN_IF_ERROR(Save(job, before, std::move(change)));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Committing changes.

void JobManager::AddTransition(JobRecord& job, Change& change, JobState to, std::string reason) {
  CHECK(IsTransitionAllowed(job.state, to))
      << "job " << job.id << ": " << JobStateName(job.state) << " -> " << JobStateName(to);
  const absl::Time now = absl::Now();
  JobEventRecord event;
  event.job_id = job.id;
  event.sequence = ++job.last_event_sequence;
  event.time = now;
  event.from_state = job.state;
  event.to_state = to;
  event.attempt = job.attempt;
  event.reason = reason;
  change.events.push_back(std::move(event));
  job.state = to;
  job.reason = std::move(reason);
  if (to == JobState::kPending) job.queued_at = now;
  if (to == JobState::kRunning && job.started_at == absl::UnixEpoch()) job.started_at = now;
  if (IsTerminal(to)) job.finished_at = now;
}

void JobManager::AddMessage(JobRecord& job, Change& change, std::string message) {
  JobEventRecord event;
  event.job_id = job.id;
  event.sequence = ++job.last_event_sequence;
  event.time = absl::Now();
  event.from_state = job.state;
  event.to_state = job.state;
  event.attempt = job.attempt;
  event.message = std::move(message);
  change.events.push_back(std::move(event));
}

void JobManager::FailAttempt(JobRecord& job, Change& change, FailureClass failure,
                             absl::string_view detail) {
  if (failure == FailureClass::kUnspecified) failure = FailureClass::kInternal;
  FailureDecision decision = DecideOnFailure(failure, job.attempt, job.max_restarts, detail,
                                             job.last_checkpoint, job.preemptions);
  job.failure_class = failure;
  job.preempted_by.clear();  // a failure ends a preemption under way too
  job.preempt_deadline = absl::UnixEpoch();
  if (decision.next != JobState::kRetrying) {
    AddTransition(job, change, JobState::kFailed, std::move(decision.reason));
    return;
  }
  AddTransition(job, change, JobState::kRetrying, std::move(decision.reason));
  job.worker_ids.clear();
  std::string waiting = absl::StrCat("waiting to be rescheduled for attempt ", job.attempt + 1);
  if (failure == FailureClass::kStorage) {
    // Storage needs time to recover (space freed, a volume remounted):
    // 10 s, 20 s, 40 s, ... at most 5 minutes between attempts.
    const int failures = ++storage_failures_[job.id];
    const absl::Duration backoff =
        std::min(absl::Seconds(10) * (1 << std::min(failures - 1, 5)), absl::Minutes(5));
    retry_after_[job.id] = absl::Now() + backoff;
    absl::StrAppend(&waiting, " in ", absl::FormatDuration(backoff), " (storage backoff)");
  }
  AddTransition(job, change, JobState::kPending, std::move(waiting));
  change.restarted = true;
}

absl::Status JobManager::Save(JobRecord& job, JobState before, Change change) {
  const absl::Time now = absl::Now();
  ++job.revision;
  job.updated_at = now;
  {
    ASSIGN_OR_RETURN(sqlite::Transaction tx, store_->Begin());
    if (change.insert) {
      ASSIGN_OR_RETURN(job.seq, store_->InsertJob(job));
    } else {
      RETURN_IF_ERROR(store_->UpdateJob(job));
    }
    for (const JobEventRecord& event : change.events) RETURN_IF_ERROR(store_->AppendEvent(event));
    for (const AssignmentRecord& a : change.new_assignments) {
      RETURN_IF_ERROR(store_->InsertAssignment(a));
    }
    for (const AssignmentRecord& a : change.updated_assignments) {
      RETURN_IF_ERROR(store_->UpdateAssignment(a));
    }
    RETURN_IF_ERROR(tx.Commit());
  }

  // Memory follows what was committed.
  for (const AssignmentRecord& a : change.new_assignments) {
    auto w = workers_.find(a.worker_id);
    if (w != workers_.end()) w->second.active.push_back(a);
  }
  for (const AssignmentRecord& a : change.updated_assignments) ForgetIfInactive(a);
  if (!change.new_assignments.empty() || !change.updated_assignments.empty()) {
    UpdateWorkerCounts();
  }
  if (change.insert || before != job.state) {
    if (!change.insert) metrics_->SetJobCount(before, --counts_[before]);
    metrics_->SetJobCount(job.state, ++counts_[job.state]);
  }
  if (job.state == JobState::kPending) {
    if (pending_.Add(ToSchedulerJob(job), job.reason)) unexplained_.insert(job.id);
  } else {
    pending_.Remove(job.id);
    unexplained_.erase(job.id);
    unwritten_.erase(job.id);
  }
  auto live = live_.find(job.id);
  if (job.state == JobState::kScheduled || job.state == JobState::kRunning) {
    if (live == live_.end() || live->second.attempt != job.attempt) {
      LiveAttempt fresh;
      fresh.attempt = job.attempt;
      fresh.owner = job.owner;
      fresh.active_at = now;
      fresh.succeeded.assign(job.world_size, false);
      fresh.current_bytes.assign(job.world_size, 0);
      if (live != live_.end()) rendezvous_->DropScope(Scope(job.id, live->second.attempt));
      live_[job.id] = std::move(fresh);
      rendezvous_->OpenScope(Scope(job.id, job.attempt));
    }
    SyncLive(job);
  } else if (live != live_.end()) {
    rendezvous_->DropScope(Scope(job.id, live->second.attempt));
    live_.erase(live);
    assigned_.SignalAll();  // long-polling workers of the attempt can let go of it
  }
  if (IsTerminal(job.state)) metrics_->RemoveJob(job.id);
  if (change.restarted) metrics_->CountRestart();
  if (change.preempted) metrics_->CountPreemption();
  hub_->Publish(job);
  return absl::OkStatus();
}

void JobManager::ForgetIfInactive(const AssignmentRecord& a) {
  auto w = workers_.find(a.worker_id);
  if (w == workers_.end() || a.active) return;
  auto& list = w->second.active;
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](const AssignmentRecord& x) {
                              return x.job_id == a.job_id && x.attempt == a.attempt &&
                                     x.rank == a.rank;
                            }),
             list.end());
}

absl::Status JobManager::SaveAssignments(const std::vector<AssignmentRecord>& rows) {
  if (rows.empty()) return absl::OkStatus();
  {
    ASSIGN_OR_RETURN(sqlite::Transaction tx, store_->Begin());
    for (const AssignmentRecord& a : rows) RETURN_IF_ERROR(store_->UpdateAssignment(a));
    RETURN_IF_ERROR(tx.Commit());
  }
  for (const AssignmentRecord& a : rows) ForgetIfInactive(a);
  UpdateWorkerCounts();
  return absl::OkStatus();
}

void JobManager::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  assigned_.SignalAll();
}

// ---------------------------------------------------------------------------
// Ids.

absl::StatusOr<std::string> JobManager::NewJobId(const std::string& name) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  for (int tries = 0; tries < 20; ++tries) {
    std::string id = name.substr(0, 100) + "-";
    for (int i = 0; i < 6; ++i) {
      id.push_back(kAlphabet[absl::Uniform<size_t>(bitgen_, 0, sizeof(kAlphabet) - 1)]);
    }
    ASSIGN_OR_RETURN(std::optional<JobRecord> clash, store_->FindJob(id));
    if (!clash) return id;
  }
  return absl::InternalError("could not find an unused job id");
}

std::string JobManager::NewWorkerId(const std::string& name) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  const std::string base = ValidId(name) && name.size() <= 40 ? name : "worker";
  while (true) {
    std::string id = base + "-";
    for (int i = 0; i < 4; ++i) {
      id.push_back(kAlphabet[absl::Uniform<size_t>(bitgen_, 0, sizeof(kAlphabet) - 1)]);
    }
    if (!workers_.contains(id)) return id;
  }
}

void JobManager::ApplyRetention(absl::Time now) {
  if (now < next_retention_) return;
  next_retention_ = now + options_.retention_interval;
  if (options_.retain_finished <= absl::ZeroDuration() && options_.max_finished_per_user <= 0) {
    return;
  }
  const absl::Time ended_before = options_.retain_finished > absl::ZeroDuration()
                                      ? now - options_.retain_finished
                                      : absl::InfinitePast();
  // Batches keep each transaction (and this lock) short.
  constexpr int64_t kBatch = 500;
  absl::StatusOr<std::vector<Store::RemovedJob>> removed =
      store_->RemoveEndedJobs(ended_before, options_.max_finished_per_user, kBatch);
  if (!removed.ok()) {
    LOG(ERROR) << "retention: " << removed.status();
    return;
  }
  for (const Store::RemovedJob& job : *removed) {
    metrics_->SetJobCount(job.state, --counts_[job.state]);
    auto it = spec_bytes_by_owner_.find(job.owner);
    if (it != spec_bytes_by_owner_.end())
      it->second = std::max<int64_t>(0, it->second - job.spec_bytes);
  }
  if (!removed->empty()) {
    LOG(INFO) << "retention removed " << removed->size() << " ended jobs from the database";
  }
  if (static_cast<int64_t>(removed->size()) == kBatch) next_retention_ = now;  // more to do
}

}  // namespace sbp::server
