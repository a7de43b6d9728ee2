// JobManager: the worker API (register, heartbeat, assignments, progress, finish).
#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "common/input_limits.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/job_manager.h"
#include "server/job_manager_internal.h"

namespace sbp::server {

using manager_internal::InvalidField;
using manager_internal::kMaxIdLength;
using manager_internal::kMaxTextLength;
using manager_internal::kMaxWorkerVersionLength;
using manager_internal::OutcomeName;
using manager_internal::Scope;
using manager_internal::ValidId;

// ---------------------------------------------------------------------------
// Workers.

absl::StatusOr<JobManager::WorkerEntry*> JobManager::LiveWorker(const std::string& worker_id) {
  if (worker_id.empty()) return InvalidField("worker_id", "is required");
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.record.lost) {
    return absl::NotFoundError(absl::StrCat(
        "worker ", worker_id,
        " is not registered (its lease expired or the coordinator lost it); register again"));
  }
  it->second.last_seen = absl::Now();
  it->second.confirmed = true;
  return &it->second;
}

bool JobManager::IsLive(const AssignmentRecord& a) const {
  auto it = live_.find(a.job_id);
  return it != live_.end() && it->second.attempt == a.attempt;
}

void JobManager::NoteRunning(WorkerEntry& worker, const std::optional<AttemptKey>& running) const {
  const bool stale =
      running.has_value() && !IsLive(AssignmentRecord{running->job_id, running->attempt});
  if (stale && worker.finishing != running) {
    LOG(INFO) << "worker " << worker.record.id << " is still finishing job " << running->job_id
              << " attempt " << running->attempt << "; not idle until it stops";
  }
  worker.finishing = stale ? running : std::nullopt;
}

bool JobManager::ReleaseFinishedAssignments(WorkerEntry& worker) {
  std::vector<AssignmentRecord> released;
  for (const AssignmentRecord& a : worker.active) {
    if (IsLive(a)) continue;
    AssignmentRecord r = a;
    r.active = false;
    r.outcome = "RELEASED";
    released.push_back(std::move(r));
  }
  if (released.empty()) return false;
  absl::Status status = SaveAssignments(released);
  if (!status.ok()) {
    LOG(ERROR) << "releasing assignments of worker " << worker.record.id << ": " << status;
    return false;
  }
  return true;
}

absl::StatusOr<Registration> JobManager::Register(const RegisterRequest& request) {
  if (request.memory_bytes <= 0) {
    return InvalidField("memory_bytes", absl::StrCat("must be a positive number of bytes (got ",
                                                     request.memory_bytes, ")"));
  }
  if (request.host_memory_bytes < 0 || request.offload_disk_bytes < 0) {
    const bool host = request.host_memory_bytes < 0;
    return InvalidField(
        host ? "host_memory_bytes" : "offload_disk_bytes",
        absl::StrCat("must be 0 (none) or a positive number of bytes (got ",
                     host ? request.host_memory_bytes : request.offload_disk_bytes, ")"));
  }
  if (request.name.size() > kMaxIdLength) {
    return InvalidField("name", absl::StrCat("must be at most ", kMaxIdLength, " characters"));
  }
  // Shown to every user by `sbp workers`: printable ASCII only, bounded.
  if (!IsPrintableAscii(request.name)) {
    return InvalidField("name", "must be printable ASCII (no control characters)");
  }
  if (request.version.size() > kMaxWorkerVersionLength || !IsPrintableAscii(request.version)) {
    return InvalidField("version", absl::StrCat("must be at most ", kMaxWorkerVersionLength,
                                                " characters of printable ASCII (got ",
                                                request.version.size(), " bytes)"));
  }
  if (!request.worker_id.empty() && !ValidId(request.worker_id)) {
    return InvalidField("worker_id", "must be an id returned by an earlier Register");
  }
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  std::string id = request.worker_id.empty() ? NewWorkerId(request.name) : request.worker_id;
  auto [it, created] = workers_.try_emplace(id);
  WorkerEntry& entry = it->second;
  if (!created && !entry.record.identity.empty() && entry.record.identity != request.identity) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker_id: ", id, " is bound to another worker identity; register without an id"));
  }
  entry.record.identity = request.identity;
  const bool was_lost = !created && entry.record.lost;
  entry.record.id = id;
  entry.record.name = request.name.empty() ? id : request.name;
  entry.record.device = request.device;
  entry.record.memory_bytes = request.memory_bytes;
  entry.record.host_memory_bytes = request.host_memory_bytes;
  entry.record.offload_disk_bytes = request.offload_disk_bytes;
  entry.record.version = request.version;
  if (created || was_lost) entry.record.registered_at = now;
  entry.record.last_heartbeat = now;
  entry.record.lost = false;
  entry.last_seen = now;
  entry.confirmed = true;
  entry.memory.capacity_bytes = request.memory_bytes;
  NoteRunning(entry, request.running);
  absl::Status saved = store_->UpsertWorker(entry.record);
  if (!saved.ok()) {
    if (created) workers_.erase(it);
    return saved;
  }
  LOG(INFO) << "worker " << id << (created ? " registered" : " re-registered") << " ("
            << DeviceKindName(request.device) << ", " << FormatByteSize(request.memory_bytes)
            << (request.host_memory_bytes > 0
                    ? absl::StrCat(", host memory ", FormatByteSize(request.host_memory_bytes))
                    : std::string())
            << (request.offload_disk_bytes > 0
                    ? absl::StrCat(", offload disk ", FormatByteSize(request.offload_disk_bytes))
                    : std::string())
            << ")";
  RunScheduler();
  UpdateGauges();
  return Registration{id, LeaseSeconds(), HeartbeatSeconds()};
}

int JobManager::LeaseSeconds() const {
  return static_cast<int>(absl::ToInt64Seconds(options_.lease));
}

int JobManager::HeartbeatSeconds() const { return std::max(1, LeaseSeconds() / 3); }

absl::StatusOr<HeartbeatResult> JobManager::Heartbeat(const std::string& worker_id,
                                                      const std::optional<AttemptKey>& running,
                                                      const MemoryUsageRecord& memory) {
  if (worker_id.empty()) return InvalidField("worker_id", "is required");
  absl::MutexLock lock(&mu_);
  HeartbeatResult result;
  result.lease_seconds = LeaseSeconds();
  result.heartbeat_seconds = HeartbeatSeconds();
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.record.lost) return result;
  WorkerEntry& w = it->second;
  const bool was_confirmed = w.confirmed;
  const absl::Time now = absl::Now();
  w.last_seen = now;
  w.confirmed = true;
  w.memory.current_bytes = memory.current_bytes;
  w.memory.peak_bytes = memory.peak_bytes;
  if (memory.capacity_bytes > 0) w.memory.capacity_bytes = memory.capacity_bytes;
  // The stored heartbeat time follows in batches (SaveHeartbeats): one
  // transaction per tick rather than a write per heartbeat.
  result.registered = true;
  for (const AssignmentRecord& a : w.active) {
    if (!IsLive(a)) {
      result.stop_attempts.push_back({a.job_id, a.attempt});
    } else if (!live_[a.job_id].preempted_by.empty()) {
      result.checkpoint_attempts.push_back({a.job_id, a.attempt});
    }
  }
  const bool was_finishing = w.finishing.has_value();
  NoteRunning(w, running);
  if (w.finishing.has_value()) result.stop_attempts.push_back(*w.finishing);
  if (!was_confirmed || (was_finishing && !w.finishing.has_value())) RunScheduler();
  return result;
}

absl::StatusOr<std::optional<AssignmentView>> JobManager::GetAssignment(
    const std::string& worker_id, absl::Duration wait, const std::function<bool()>& cancelled) {
  if (worker_id.empty()) return InvalidField("worker_id", "is required");
  wait = std::clamp(wait, absl::ZeroDuration(), absl::Seconds(kMaxAssignmentWaitSeconds));
  const absl::Time deadline = absl::Now() + wait;
  absl::MutexLock lock(&mu_);
  while (true) {
    ASSIGN_OR_RETURN(WorkerEntry * w, LiveWorker(worker_id));
    // Asking for work means the worker runs nothing: let go of what is over.
    if (ReleaseFinishedAssignments(*w)) RunScheduler();
    for (const AssignmentRecord& a : w->active) {
      if (!IsLive(a)) continue;
      ASSIGN_OR_RETURN(JobRecord job, store_->GetJob(a.job_id));
      return AssignmentView{a.job_id,          a.attempt,     a.rank,
                            job.world_size,    job.spec_yaml, Scope(a.job_id, a.attempt),
                            RunArea(job.owner)};
    }
    const absl::Time now = absl::Now();
    if (shutdown_ || now >= deadline || (cancelled && cancelled())) {
      return std::optional<AssignmentView>();
    }
    assigned_.WaitWithDeadline(&mu_, std::min(deadline, now + absl::Milliseconds(500)));
  }
}

absl::StatusOr<ProgressAnswer> JobManager::ReportProgress(const ProgressReport& report) {
  if (report.job_id.empty()) return InvalidField("job_id", "is required");
  if (report.attempt < 1) {
    return InvalidField("attempt", absl::StrCat("must be at least 1 (got ", report.attempt, ")"));
  }
  if (report.checkpoint.size() > kMaxTextLength || report.message.size() > kMaxTextLength) {
    return InvalidField(report.checkpoint.size() > kMaxTextLength ? "checkpoint" : "message",
                        absl::StrCat("must be at most ", kMaxTextLength, " bytes"));
  }
  const std::string& tier = report.progress.checkpoint_tier;
  if (!tier.empty() && tier != "device" && tier != "host" && tier != "disk") {
    return InvalidField("progress.checkpoint_tier",
                        "must be \"device\", \"host\", \"disk\" or empty");
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(WorkerEntry * w, LiveWorker(report.worker_id));
  ASSIGN_OR_RETURN(JobRecord job, store_->GetJob(report.job_id));
  const bool holds =
      std::any_of(w->active.begin(), w->active.end(), [&](const AssignmentRecord& a) {
        return a.job_id == report.job_id && a.attempt == report.attempt && a.rank == report.rank;
      });
  if (report.attempt != job.attempt) {
    return absl::AbortedError(absl::StrCat("attempt ", report.attempt, " of job ", job.id,
                                           " is stale: the job is on attempt ", job.attempt));
  }
  if (!holds) {
    return absl::AbortedError(absl::StrCat("worker ", w->record.id, " does not hold rank ",
                                           report.rank, " of job ", job.id, " attempt ",
                                           report.attempt));
  }
  if (job.state == JobState::kCancelled) {
    // The workers of a cancelled attempt finish as they stop: the step they
    // stopped at and the checkpoint they wrote there are the job's last word.
    RETURN_IF_ERROR(RecordStoppingProgress(job, report));
    return ProgressAnswer{true, false};
  }
  auto live = live_.find(job.id);
  if (live == live_.end()) {
    return absl::AbortedError(absl::StrCat("attempt ", report.attempt, " of job ", job.id,
                                           " is over (the job is ", JobStateName(job.state), ")"));
  }
  LiveAttempt& attempt = live->second;
  const ProgressAnswer answer{false, !attempt.preempted_by.empty()};
  const absl::Time now = absl::Now();
  attempt.active_at = now;
  if (report.rank >= 0 && report.rank < static_cast<int>(attempt.current_bytes.size())) {
    attempt.current_bytes[report.rank] = report.progress.current_bytes;
  }
  const bool peak_rose = report.progress.peak_bytes > attempt.peak_bytes;
  attempt.peak_bytes = std::max(attempt.peak_bytes, report.progress.peak_bytes);
  const bool lead = report.rank == 0;
  if (!lead && !peak_rose && report.checkpoint.empty() && report.message.empty() &&
      job.state == JobState::kRunning) {
    return answer;  // nothing visible changed: no write
  }

  const JobState before = job.state;
  Change change;
  if (job.state == JobState::kScheduled) {
    AddTransition(
        job, change, JobState::kRunning,
        absl::StrCat("attempt ", job.attempt, " running on ", absl::StrJoin(job.worker_ids, ", ")));
  }
  if (lead) {
    job.progress = report.progress;
    job.progress.updated_at = now;
  }
  job.progress.peak_bytes = attempt.peak_bytes;
  job.progress.current_bytes =
      *std::max_element(attempt.current_bytes.begin(), attempt.current_bytes.end());
  if (!report.checkpoint.empty()) {
    job.last_checkpoint = report.checkpoint;
    AddMessage(job, change,
               absl::StrCat("checkpoint ", report.checkpoint, " at step ", report.progress.step));
  }
  if (!report.message.empty()) {
    AddMessage(job, change, absl::StrCat("rank ", report.rank, ": ", report.message));
  }
  job.active_at = now;
  RETURN_IF_ERROR(Save(job, before, std::move(change)));
  if (before == JobState::kScheduled) {
    metrics_->ObserveQueueWait(absl::ToDoubleSeconds(now - job.queued_at));
  }
  metrics_->SetJobProgress(job.id, static_cast<double>(job.progress.step),
                           job.progress.tokens_per_second,
                           static_cast<double>(job.progress.peak_bytes));
  return answer;
}

absl::Status JobManager::RecordStoppingProgress(JobRecord& job, const ProgressReport& report) {
  const bool lead = report.rank == 0;
  const bool stepped = lead && report.progress.step > job.progress.step;
  if (!stepped && report.checkpoint.empty()) return absl::OkStatus();
  Change change;
  if (stepped) {
    job.progress = report.progress;
    job.progress.updated_at = absl::Now();
  }
  if (!report.checkpoint.empty()) {
    job.last_checkpoint = report.checkpoint;
    AddMessage(job, change,
               absl::StrCat("checkpoint ", report.checkpoint, " at step ", report.progress.step,
                            " (written as the cancelled attempt stopped)"));
  }
  return Save(job, job.state, std::move(change));
}

bool JobManager::AttemptStillHeld(const JobRecord& job) const {
  for (const auto& [id, worker] : workers_) {
    for (const AssignmentRecord& a : worker.active) {
      if (a.job_id == job.id && a.attempt == job.attempt && a.active) return true;
    }
  }
  return false;
}

absl::Status JobManager::Finish(const FinishReport& report) {
  if (report.job_id.empty()) return InvalidField("job_id", "is required");
  if (report.outcome == Outcome::kUnspecified) {
    return InvalidField("outcome",
                        "must be OUTCOME_SUCCEEDED, OUTCOME_FAILED, OUTCOME_CANCELLED or "
                        "OUTCOME_PREEMPTED");
  }
  if (report.message.size() > kMaxTextLength) {
    return InvalidField("message", absl::StrCat("must be at most ", kMaxTextLength, " bytes"));
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(WorkerEntry * w, LiveWorker(report.worker_id));
  ASSIGN_OR_RETURN(JobRecord job, store_->GetJob(report.job_id));
  auto held = std::find_if(w->active.begin(), w->active.end(), [&](const AssignmentRecord& a) {
    return a.job_id == report.job_id && a.attempt == report.attempt && a.rank == report.rank;
  });
  if (held == w->active.end()) {
    return absl::AbortedError(absl::StrCat("worker ", w->record.id, " does not hold rank ",
                                           report.rank, " of job ", job.id, " attempt ",
                                           report.attempt));
  }
  AssignmentRecord done = *held;
  done.active = false;
  done.outcome = std::string(OutcomeName(report.outcome));
  const std::string worker_id = w->record.id;

  auto live = live_.find(job.id);
  if (live == live_.end() || live->second.attempt != report.attempt) {
    // The attempt is over; the worker is free again either way.
    RETURN_IF_ERROR(SaveAssignments({done}));
    RunScheduler();
    if (job.state == JobState::kCancelled && report.attempt == job.attempt) {
      if (report.rank == 0 && !report.message.empty()) {
        // Where the cancelled attempt stopped, in the job's events.
        Change change;
        AddMessage(job, change, absl::StrCat("rank 0 on worker ", worker_id, " ", report.message));
        RETURN_IF_ERROR(Save(job, job.state, std::move(change)));
      }
      return absl::OkStatus();
    }
    return absl::AbortedError(absl::StrCat("attempt ", report.attempt, " of job ", job.id,
                                           " is over (the job is ", JobStateName(job.state),
                                           ", attempt ", job.attempt, ")"));
  }

  const JobState before = job.state;
  const std::string who = absl::StrCat("rank ", report.rank, " on worker ", worker_id);
  const std::string detail =
      report.message.empty() ? std::string() : absl::StrCat(": ", report.message);
  Change change;
  change.updated_assignments.push_back(done);
  switch (report.outcome) {
    case Outcome::kFailed: {
      const FailureClass failure = report.failure_class == FailureClass::kUnspecified
                                       ? FailureClass::kInternal
                                       : report.failure_class;
      FailAttempt(job, change, failure,
                  absl::StrCat(who, " failed (", FailureClassName(failure), ")", detail));
      break;
    }
    case Outcome::kCancelled:
      AddTransition(job, change, JobState::kCancelled, absl::StrCat(who, " cancelled", detail));
      break;
    case Outcome::kSucceeded:
    case Outcome::kPreempted:
    case Outcome::kUnspecified: {
      // Every rank of a preempted attempt stops at the same step (the
      // trainer's ranks agree on it), rank 0 having committed the checkpoint.
      LiveAttempt& attempt = live->second;
      if (report.rank >= 0 && report.rank < static_cast<int>(attempt.succeeded.size())) {
        (report.outcome == Outcome::kPreempted ? attempt.stopped : attempt.succeeded)[report.rank] =
            true;
      }
      bool all = true, stopped = false;
      for (size_t r = 0; r < attempt.succeeded.size(); ++r) {
        all = all && (attempt.succeeded[r] || attempt.stopped[r]);
        stopped = stopped || attempt.stopped[r];
      }
      if (!all) {
        RETURN_IF_ERROR(SaveAssignments({done}));
        return absl::OkStatus();
      }
      if (stopped) {
        CompletePreemption(
            job, change,
            absl::StrCat("attempt ", job.attempt, " stopped after step ", job.progress.step,
                         job.last_checkpoint.empty()
                             ? std::string(" before its first checkpoint; it starts over")
                             : absl::StrCat("; it resumes from checkpoint ", job.last_checkpoint)));
        break;
      }
      if (job.state == JobState::kScheduled) {
        AddTransition(
            job, change, JobState::kRunning,
            absl::StrCat("attempt ", job.attempt, " ran on ", absl::StrJoin(job.worker_ids, ", ")));
      }
      AddTransition(job, change, JobState::kSucceeded,
                    job.world_size == 1
                        ? absl::StrCat("finished at step ", job.progress.step)
                        : absl::StrCat("all ", job.world_size, " ranks finished at step ",
                                       job.progress.step));
      break;
    }
  }
  RETURN_IF_ERROR(Save(job, before, std::move(change)));
  LOG(INFO) << "job " << job.id << " attempt " << report.attempt << ": " << who << " "
            << OutcomeName(report.outcome) << " -> " << JobStateName(job.state);
  RunScheduler();
  return absl::OkStatus();
}

absl::Status JobManager::CheckWorkerIdentity(const std::string& worker_id, const Identity& caller) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.record.identity.empty() ||
      it->second.record.identity == caller.name) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "worker ", worker_id, " is registered under another identity than ", caller.name));
}

absl::Status JobManager::CheckRendezvousScope(const std::string& scope,
                                              const std::string& worker_id,
                                              const Identity& caller) {
  const size_t slash = scope.rfind('/');
  int attempt = 0;
  if (slash == std::string::npos || slash == 0 ||
      !absl::SimpleAtoi(absl::string_view(scope).substr(slash + 1), &attempt) || attempt < 1) {
    return InvalidField("scope", absl::StrCat("must be \"<job>/<attempt>\" as given in the "
                                              "assignment (got \"",
                                              scope, "\")"));
  }
  const std::string job_id = scope.substr(0, slash);
  absl::MutexLock lock(&mu_);
  auto live = live_.find(job_id);
  if (live != live_.end() && live->second.attempt == attempt) {
    // Open (anonymous) workers need not name themselves; identified ones
    // must be a rank of the attempt, under their own identity.
    if (worker_id.empty() && caller.name == "anonymous") return absl::OkStatus();
    if (worker_id.empty()) return InvalidField("worker_id", "is required");
    auto w = workers_.find(worker_id);
    const bool holds_rank =
        w != workers_.end() && !w->second.record.lost &&
        (w->second.record.identity.empty() || w->second.record.identity == caller.name) &&
        std::any_of(
            w->second.active.begin(), w->second.active.end(),
            [&](const AssignmentRecord& a) { return a.job_id == job_id && a.attempt == attempt; });
    if (holds_rank) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrCat("scope ", scope, ": worker ", worker_id, " holds no rank in this attempt"));
  }
  ASSIGN_OR_RETURN(std::optional<JobRecord> job, store_->FindJob(job_id));
  if (!job) return absl::NotFoundError(absl::StrCat("scope ", scope, ": no job ", job_id));
  return absl::AbortedError(absl::StrCat("scope ", scope, ": attempt ", attempt, " of job ", job_id,
                                         " is not running (the job is ", JobStateName(job->state),
                                         ", attempt ", job->attempt, ")"));
}

}  // namespace sbp::server
