// The coordinator's domain logic, free of gRPC: jobs (submit, get, list,
// cancel, events), workers (register, heartbeat, assignments, progress,
// finish), gang scheduling, leases and stalls, and recovery from SQLite.
//
// One mutex serializes every change; each change is one SQLite transaction
// (the job row, its event rows, assignment rows), and only after it commits
// do the in-memory indexes, the watch hub and the metrics follow. SQLite is
// the source of truth for jobs; memory holds what the timers and the
// scheduler need (pending jobs, live attempts, workers and their leases).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/admission.h"
#include "server/identity.h"
#include "server/job_output.h"
#include "server/job_state.h"
#include "server/metrics.h"
#include "server/output_hub.h"
#include "server/pending_index.h"
#include "server/records.h"
#include "server/rendezvous.h"
#include "server/scheduler.h"
#include "server/store.h"
#include "server/watch_hub.h"

namespace sbp::server {

// Limits the coordinator adds to the job spec's own validation.
inline constexpr int kMaxWorldSize = 1024;
inline constexpr int kMaxRestarts = 1000;
inline constexpr int kMaxPriority = 1000000;
inline constexpr int kDefaultPageSize = 100;
inline constexpr int kMaxPageSize = 1000;
inline constexpr int kMaxEventsPerCall = 1000;
inline constexpr int kMaxAssignmentWaitSeconds = 30;

struct JobManagerOptions {
  absl::Duration lease = absl::Seconds(15);
  absl::Duration stall = absl::Seconds(600);
  absl::Duration schedule_interval = absl::Seconds(1);  // timer pass of the scheduler
  // How long a preempted attempt has to checkpoint at its next step boundary
  // and stop; after that it is ended anyway (and resumes from its last
  // checkpoint).
  absl::Duration preemption_grace = absl::Seconds(60);
  // Relative model paths of job specs resolve here for memory planning at
  // submit; "" leaves them unresolved (see server/admission.h).
  std::string work_dir;
  // The identities, for the users' quotas (null: no quotas).
  std::shared_ptr<const IdentityDirectory> identities;
  // Job paths are confined to work_dir (worker/train/job_paths.h) when it is
  // set; read-only paths may also lie in shared_dir. With `user_areas` (a
  // users file) a job's run directory lies in <work_dir>/<owner>/.
  std::string shared_dir;
  bool user_areas = false;
  // false: paths resolve in work_dir but are not confined (`sbp run`).
  bool confine_paths = true;
  // Retention of ended jobs (SUCCEEDED, FAILED, CANCELLED): removed from the
  // database once they ended longer than `retain_finished` ago (0: kept for
  // any age) or beyond the newest `max_finished_per_user` of their owner (0:
  // any number). Run directories are never touched.
  absl::Duration retain_finished = absl::ZeroDuration();
  int64_t max_finished_per_user = 0;
  absl::Duration retention_interval = absl::Minutes(1);  // how often the policy runs
  // The specs (YAML and JSON) one user may have stored, counted at submit
  // (0: no limit): a submit past it is RESOURCE_EXHAUSTED.
  int64_t max_spec_bytes_per_user = 0;
  // What the coordinator keeps of each attempt and rank's metrics and log
  // lines (server/job_output.h).
  OutputCaps metrics_caps = kDefaultMetricsCaps;
  OutputCaps log_caps = kDefaultLogCaps;
};

struct SubmitResult {
  JobRecord job;
  bool created = false;
};

struct JobPage {
  std::vector<JobRecord> jobs;
  std::string next_page_token;  // "" on the last page
};

struct MemoryUsageRecord {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t capacity_bytes = 0;
};

struct WorkerView {
  WorkerRecord record;
  WorkerState state = WorkerState::kIdle;
  std::string job_id;  // the attempt it runs (or still winds down)
  MemoryUsageRecord memory;
  absl::Time last_heartbeat = absl::UnixEpoch();
};

struct AttemptKey {
  std::string job_id;
  int attempt = 0;
  bool operator==(const AttemptKey&) const = default;
};

struct RegisterRequest {
  std::string worker_id;  // "" for a new worker
  std::string name;
  DeviceKind device = DeviceKind::kCpu;
  int64_t memory_bytes = 0;
  int64_t host_memory_bytes = 0;   // offered to the memory tiers; 0: none
  int64_t offload_disk_bytes = 0;  // offered to `checkpoints: auto`'s disk tier; 0: none
  std::string version;
  std::optional<AttemptKey> running;  // the attempt the worker is still training
  std::string identity;               // the worker identity registering it
};

struct Registration {
  std::string worker_id;
  int lease_seconds = 0;
  int heartbeat_seconds = 0;
};

struct HeartbeatResult {
  bool registered = false;
  int lease_seconds = 0;  // the lease in force (as in Registration)
  int heartbeat_seconds = 0;
  std::vector<AttemptKey> stop_attempts;        // attempts it holds that are over
  std::vector<AttemptKey> checkpoint_attempts;  // preempted: checkpoint and stop
};

// The coordinator's answer to a progress report.
struct ProgressAnswer {
  bool cancel_requested = false;
  bool checkpoint_and_stop = false;  // preempted: checkpoint at the next step, then stop
};

struct AssignmentView {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int world_size = 0;
  std::string spec_yaml;
  std::string rendezvous_scope;  // "<job>/<attempt>"
  std::string run_area;          // JobManager::RunArea of the job's owner
};

struct ProgressReport {
  std::string worker_id;
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  ProgressRecord progress;
  std::string checkpoint;
  std::string message;
};

// kPreempted: stopped at a step boundary with a checkpoint, as asked.
enum class Outcome {
  kUnspecified = 0,
  kSucceeded = 1,
  kFailed = 2,
  kCancelled = 3,
  kPreempted = 4
};

// A batch of one rank's output lines (AppendOutputRequest).
struct OutputReport {
  std::string worker_id;
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int64_t metrics_first = 0;
  std::vector<std::string> metrics_lines;
  int64_t logs_first = 0;
  std::vector<std::string> log_lines;
};

struct FinishReport {
  std::string worker_id;
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  Outcome outcome = Outcome::kUnspecified;
  FailureClass failure_class = FailureClass::kUnspecified;
  std::string message;
};

class JobManager {
 public:
  // Loads every job, worker and assignment from `store` (recovery). The
  // pointers must outlive the manager.
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(Store* store, Metrics* metrics,
                                                            WatchHub* hub,
                                                            RendezvousStore* rendezvous,
                                                            const JobManagerOptions& options);

  // Jobs (client API), on behalf of `caller`. A job belongs to the identity
  // that submitted it: a user reaches only their own jobs (another's id is
  // NOT_FOUND, as if it did not exist, so ids do not leak); an admin reaches
  // every job. Submit enforces the caller's quotas (pending jobs, priority).
  absl::StatusOr<SubmitResult> Submit(const Identity& caller, const std::string& spec_yaml,
                                      const std::string& request_id);
  absl::StatusOr<JobRecord> GetJob(const Identity& caller, const std::string& id);
  // Without `with_spec` the specs are not read (spec_yaml stays empty).
  // `user`: an admin's filter by owner ("" = every job); users always see
  // only their own.
  absl::StatusOr<JobPage> ListJobs(const Identity& caller, const std::vector<JobState>& states,
                                   int page_size, const std::string& page_token,
                                   bool with_spec = true, const std::string& user = "");
  absl::StatusOr<JobRecord> Cancel(const Identity& caller, const std::string& id,
                                   const std::string& reason);
  absl::StatusOr<std::vector<JobEventRecord>> Events(const Identity& caller, const std::string& id,
                                                     int64_t after_sequence);
  // Every worker; the job a busy worker runs is named only to the job's
  // owner and to admins (`job_id` is empty for anyone else: a job id leads
  // to its run directory).
  std::vector<WorkerView> ListWorkers(const Identity& caller);

  // Workers (worker API).
  absl::StatusOr<Registration> Register(const RegisterRequest& request);
  // `running`: the attempt the worker says it is training (RegisterRequest).
  absl::StatusOr<HeartbeatResult> Heartbeat(const std::string& worker_id,
                                            const std::optional<AttemptKey>& running,
                                            const MemoryUsageRecord& memory);
  // Waits up to `wait` for work; nullopt when there is none. `cancelled` is
  // polled while waiting (the client went away).
  absl::StatusOr<std::optional<AssignmentView>> GetAssignment(
      const std::string& worker_id, absl::Duration wait, const std::function<bool()>& cancelled);
  // Says whether the job was cancelled or preempted (the worker should stop).
  absl::StatusOr<ProgressAnswer> ReportProgress(const ProgressReport& report);
  absl::Status Finish(const FinishReport& report);
  // OK when `scope` is "<job>/<attempt>" of an attempt that is SCHEDULED or
  // RUNNING; NotFound for an unknown job, Aborted for an attempt that is over.
  // OK when `worker_id` is registered under `caller` (or not registered);
  // PermissionDenied when it is bound to another worker identity.
  absl::Status CheckWorkerIdentity(const std::string& worker_id, const Identity& caller);
  // A rendezvous call: the scope's attempt is live and `worker_id`, bound to
  // `caller`, holds a rank in it.
  absl::Status CheckRendezvousScope(const std::string& scope, const std::string& worker_id,
                                    const Identity& caller);

  // A job's output (job_manager_output.cc, server/job_output.h). A worker
  // appends the lines of a rank it holds (ABORTED otherwise); the job's
  // owner or an admin reads them (anyone else: NOT_FOUND, as Get). Appends
  // are announced on output_hub() after they commit.
  absl::Status AppendOutput(const OutputReport& report);
  absl::StatusOr<OutputPage> ReadOutput(const Identity& caller, const OutputQuery& query);
  OutputHub& output_hub() { return output_hub_; }

  // Expires leases, fails stalled attempts, runs the scheduler on its timer
  // and refreshes gauges. Called by the monitor thread.
  void Tick();
  // Ends every long-poll; later calls still work but do not wait.
  void Shutdown();

 private:
  struct WorkerEntry {
    WorkerRecord record;
    absl::Time last_seen;   // lease clock
    bool confirmed = true;  // false after a restart until the worker calls in
    MemoryUsageRecord memory;
    std::vector<AssignmentRecord> active;
    // An attempt the worker still trains that is over here (its lease
    // expired, a retry took over): the worker is not idle until it stops.
    std::optional<AttemptKey> finishing;
  };
  // Records what the worker says it runs: `finishing` when that attempt is
  // no longer live here.
  void NoteRunning(WorkerEntry& worker, const std::optional<AttemptKey>& running) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct LiveAttempt {  // a SCHEDULED or RUNNING job
    int attempt = 0;
    int64_t seq = 0;
    int priority = 0;
    std::vector<std::string> worker_ids;  // by rank
    std::string owner;                    // whose quota its workers count against
    // A preemption on its way (JobRecord::preempted_by) and its deadline.
    std::string preempted_by;
    absl::Time preempt_deadline;
    std::vector<bool> stopped;           // by rank: checkpointed and stopped for the preemption
    absl::Time active_at;                // stall clock
    std::vector<bool> succeeded;         // by rank
    std::vector<int64_t> current_bytes;  // by rank, latest report
    int64_t peak_bytes = 0;              // max over ranks and reports
  };
  // One atomic change: the job row and everything that goes with it.
  struct Change {
    bool insert = false;
    bool restarted = false;  // counts in sbp_job_restarts_total once committed
    bool preempted = false;  // counts in sbp_job_preemptions_total once committed
    std::vector<JobEventRecord> events;
    std::vector<AssignmentRecord> new_assignments;
    std::vector<AssignmentRecord> updated_assignments;
  };

  JobManager(Store* store, Metrics* metrics, WatchHub* hub, RendezvousStore* rendezvous,
             const JobManagerOptions& options);
  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Moves `job` to `to` inside `change` (event, timestamps); CHECKs the edge.
  void AddTransition(JobRecord& job, Change& change, JobState to, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddMessage(JobRecord& job, Change& change, std::string message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Decides retry or failure for the job's current attempt.
  void FailAttempt(JobRecord& job, Change& change, FailureClass failure, absl::string_view detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Commits `job` (revision + 1) with `change`, then updates memory, the
  // watch hub and metrics. `before` is the state the job had when loaded.
  absl::Status Save(JobRecord& job, JobState before, Change change)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SaveAssignments(const std::vector<AssignmentRecord>& rows)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A cancelled job's last progress and checkpoint, reported as its
  // workers stop (job_manager_workers.cc).
  absl::Status RecordStoppingProgress(JobRecord& job, const ProgressReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a worker still holds the job's current attempt (JobRecord::stopping).
  bool AttemptStillHeld(const JobRecord& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // One scheduling pass (server/scheduling_pass.h): places what fits, then
  // updates the waiting reasons of the jobs the pass reached, of the jobs
  // that became pending since the last pass, and of the next `refresh_batch`
  // jobs of a walk over every pending job (so that reasons follow the
  // cluster at O(batch) per pass, whatever the queue's length). Reasons are
  // answered from memory at once and stored in batches by the timer.
  void RunScheduler(size_t refresh_batch = kEventReasonBatch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr size_t kEventReasonBatch = 256;   // passes run by an event
  static constexpr size_t kTimerReasonBatch = 1024;  // the timer's pass (Tick)
  // Writes up to `max` of the reasons not stored yet, in one transaction,
  // and publishes them (the timer's batch).
  void WriteReasons(size_t max) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr size_t kReasonWritesPerTick = 32;
  // A pending job's reason as the scheduler gives it now (it may not be
  // stored yet): what Get, List and Submit answer.
  void ShowReason(JobRecord& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdatePendingCounts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores the heartbeat times of workers whose stored one is older than half
  // a lease, in one transaction.
  void SaveHeartbeats(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Preemption (job_manager_preemption.cc): the live attempts as the
  // scheduler sees them; asking victims to checkpoint and stop; moving a
  // preempted attempt's job back to PENDING (not a restart); ending the
  // attempts whose grace ran out.
  std::vector<RunningJob> RunningJobs() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartPreemptions(const std::vector<Preemption>& preemptions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompletePreemption(JobRecord& job, Change& change, absl::string_view how)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ExpirePreemptions() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies what the live attempt mirrors of `job` (preemption, placement).
  void SyncLive(const JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status MarkLost(WorkerEntry& worker, absl::string_view why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lets go of the worker's assignments whose attempts are over; true when any.
  bool ReleaseFinishedAssignments(WorkerEntry& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<WorkerEntry*> LiveWorker(const std::string& worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsLive(const AssignmentRecord& a) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::string> NewJobId(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NewWorkerId(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateWorkerCounts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops a no-longer-active assignment from its worker's in-memory list.
  void ForgetIfInactive(const AssignmentRecord& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Device, memory, host memory and offload disk of every worker that is not
  // lost (admission).
  std::vector<WorkerCapacity> LiveWorkerCapacities() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "<owner>/" with user areas, else "".
  std::string RunArea(const std::string& owner) const;
  // The lease a worker gets, and the heartbeat interval it is told (a third).
  int LeaseSeconds() const;
  int HeartbeatSeconds() const;
  // Jobs of `owner` waiting to be scheduled.
  int64_t PendingJobsOf(const std::string& owner) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Each owner's running workers and worker quota, for the scheduler.
  ScheduleLimits CurrentLimits() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes ended jobs past the retention policy, in batches (Tick, once a
  // minute; sooner while a backlog remains).
  void ApplyRetention(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* const store_;
  Metrics* const metrics_;
  WatchHub* const hub_;
  RendezvousStore* const rendezvous_;
  const JobManagerOptions options_;
  OutputHub output_hub_;

  absl::Mutex mu_;
  absl::CondVar assigned_;  // signalled when the scheduler places jobs
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, WorkerEntry> workers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, LiveAttempt> live_ ABSL_GUARDED_BY(mu_);
  // Pending jobs with the reason last written for them.
  // Jobs retried after a storage failure wait until this time (backoff).
  absl::flat_hash_map<std::string, absl::Time> retry_after_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> storage_failures_ ABSL_GUARDED_BY(mu_);
  PendingIndex pending_ ABSL_GUARDED_BY(mu_);
  // Pending jobs whose reason the next pass computes whether it reaches
  // them or not (new, or back from a storage backoff).
  absl::flat_hash_set<std::string> unexplained_ ABSL_GUARDED_BY(mu_);
  // Where the walk that refreshes reasons goes on (PendingIndex::fifo key).
  std::pair<int64_t, uint64_t> reasons_from_ ABSL_GUARDED_BY(mu_) = {0, 0};
  // Pending jobs whose reason in pending_ is newer than the stored one.
  absl::flat_hash_set<std::string> unwritten_ ABSL_GUARDED_BY(mu_);
  std::map<JobState, int64_t> counts_ ABSL_GUARDED_BY(mu_);
  // Bytes of each owner's stored specs (max_spec_bytes_per_user).
  absl::flat_hash_map<std::string, int64_t> spec_bytes_by_owner_ ABSL_GUARDED_BY(mu_);
  absl::Time next_retention_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_schedule_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sbp::server
