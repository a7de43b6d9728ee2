// JobManager: the client API (submit, get, list, cancel, events, workers).
#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/admission.h"
#include "server/job_manager.h"
#include "server/job_manager_internal.h"
#include "worker/train/job_paths.h"
#include "worker/train/job_spec.h"

namespace sbp::server {

using manager_internal::InvalidField;
using manager_internal::kMaxRequestIdLength;
using manager_internal::kMaxTextLength;

namespace {

constexpr char kPageTokenPrefix[] = "jobs-before:";

std::string PageToken(int64_t seq) {
  return absl::WebSafeBase64Escape(absl::StrCat(kPageTokenPrefix, seq));
}

absl::StatusOr<int64_t> ParsePageToken(const std::string& token) {
  std::string text;
  int64_t seq = 0;
  if (!absl::WebSafeBase64Unescape(token, &text) || !absl::StartsWith(text, kPageTokenPrefix) ||
      !absl::SimpleAtoi(absl::string_view(text).substr(sizeof(kPageTokenPrefix) - 1), &seq) ||
      seq <= 0) {
    return InvalidField("page_token", "is not a token returned by an earlier List call");
  }
  return seq;
}

// Limits beyond the spec parser's: what fits the protocol and the cluster.
absl::Status CheckSpecLimits(const JobSpec& spec) {
  if (spec.resources.world_size > kMaxWorldSize) {
    return InvalidField(
        "spec: resources.world_size",
        absl::StrCat("must be at most ", kMaxWorldSize, " (got ", spec.resources.world_size, ")"));
  }
  if (spec.max_restarts > kMaxRestarts) {
    return InvalidField("spec: max_restarts", absl::StrCat("must be at most ", kMaxRestarts,
                                                           " (got ", spec.max_restarts, ")"));
  }
  if (spec.priority > kMaxPriority || spec.priority < -kMaxPriority) {
    return InvalidField("spec: priority", absl::StrCat("must be between ", -kMaxPriority, " and ",
                                                       kMaxPriority, " (got ", spec.priority, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------
// Jobs.

namespace {

// NOT_FOUND for a job the caller may not see: the same answer as for an id
// that does not exist.
absl::Status CheckAccess(const JobRecord& job, const Identity& caller) {
  if (caller.is_admin() || job.owner == caller.name) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("no job with id \"", job.id, "\""));
}

}  // namespace

absl::StatusOr<SubmitResult> JobManager::Submit(const Identity& caller,
                                                const std::string& spec_yaml,
                                                const std::string& request_id) {
  if (spec_yaml.empty()) return InvalidField("spec_yaml", "is required (the job spec as YAML)");
  if (spec_yaml.size() > kMaxTextLength) {
    return InvalidField("spec_yaml", absl::StrCat("must be at most ", kMaxTextLength,
                                                  " bytes (got ", spec_yaml.size(), ")"));
  }
  if (request_id.size() > kMaxRequestIdLength) {
    return InvalidField("request_id",
                        absl::StrCat("must be at most ", kMaxRequestIdLength, " characters"));
  }
  absl::StatusOr<JobSpec> parsed = ParseJobSpec(spec_yaml, "spec");
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(parsed.status().message());
  }
  const JobSpec& spec = *parsed;
  RETURN_IF_ERROR(CheckSpecLimits(spec));
  if (caller.quota.max_priority.has_value() && spec.priority > *caller.quota.max_priority) {
    return absl::PermissionDeniedError(
        absl::StrCat("priority: ", spec.priority, " is above ", caller.name, "'s ceiling of ",
                     *caller.quota.max_priority, " (quota max_priority)"));
  }
  const std::string spec_json = JobSpecToJson(spec);
  // The memory plan reads the model's config.json: outside the lock.
  const PathPolicy paths{options_.work_dir, options_.shared_dir, RunArea(caller.name),
                         options_.confine_paths};
  RETURN_IF_ERROR(CheckJobPaths(spec, paths));
  const AdmissionPlan admission = PlanAdmission(spec, paths);
  RETURN_IF_ERROR(admission.bad_input);

  absl::MutexLock lock(&mu_);
  if (!request_id.empty()) {
    // Each owner has its own request ids: another user's ids are neither
    // visible nor in the way.
    ASSIGN_OR_RETURN(std::optional<JobRecord> existing,
                     store_->FindJobByRequestId(caller.name, request_id));
    if (existing) {
      if (existing->spec_json != spec_json) {
        return absl::AlreadyExistsError(
            absl::StrCat("request_id: \"", request_id, "\" was already used for job ", existing->id,
                         " with a different spec; use a new request_id for a new job"));
      }
      return SubmitResult{std::move(*existing), false};
    }
  }
  RETURN_IF_ERROR(CheckAdmission(spec, admission, LiveWorkerCapacities()));
  if (caller.quota.max_pending_jobs > 0) {
    const int64_t waiting = PendingJobsOf(caller.name);
    if (waiting >= caller.quota.max_pending_jobs) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "quota max_pending_jobs: ", caller.name, " has ", waiting, " of ",
          caller.quota.max_pending_jobs, " jobs waiting; cancel one or wait for one to start"));
    }
  }
  // Stored history is bounded: a user's specs count against
  // max_spec_bytes_per_user from the submit until retention removes them.
  const int64_t spec_bytes = static_cast<int64_t>(spec_yaml.size() + spec_json.size());
  int64_t& stored = spec_bytes_by_owner_[caller.name];
  if (options_.max_spec_bytes_per_user > 0 &&
      stored + spec_bytes > options_.max_spec_bytes_per_user) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "quota: ", caller.name, " has ", FormatByteSize(stored), " of job specs stored and this ",
        "one is ", FormatByteSize(spec_bytes), ", over the ",
        FormatByteSize(options_.max_spec_bytes_per_user),
        " limit (--max-spec-bytes-per-user); finished jobs are removed by the retention policy "
        "(--retain-finished, --max-finished-per-user)"));
  }
  const absl::Time now = absl::Now();
  JobRecord job;
  job.owner = caller.name;
  ASSIGN_OR_RETURN(job.id, NewJobId(spec.name));
  job.name = spec.name;
  job.spec_yaml = spec_yaml;
  job.spec_json = spec_json;
  job.state = JobState::kUnspecified;
  job.max_restarts = static_cast<int>(spec.max_restarts);
  job.priority = static_cast<int>(spec.priority);
  job.world_size = static_cast<int>(spec.resources.world_size);
  job.device = spec.resources.device;
  job.required_memory_bytes = admission.required_memory_bytes;
  job.required_host_memory_bytes = admission.required_host_memory_bytes;
  job.required_offload_disk_bytes = admission.required_offload_disk_bytes;
  job.alternative_needs = admission.alternative_needs;
  job.request_id = request_id;
  job.created_at = now;
  Change change;
  change.insert = true;
  AddTransition(job, change, JobState::kPending, "submitted");
  if (!admission.note.empty()) AddMessage(job, change, admission.note);
  RETURN_IF_ERROR(Save(job, JobState::kUnspecified, std::move(change)));
  stored += spec_bytes;
  LOG(INFO) << "job " << job.id << " submitted (world_size " << job.world_size << ", "
            << DeviceKindName(job.device) << ")";
  RunScheduler();
  ASSIGN_OR_RETURN(JobRecord latest, store_->GetJob(job.id));
  ShowReason(latest);
  return SubmitResult{std::move(latest), true};
}

absl::StatusOr<JobRecord> JobManager::GetJob(const Identity& caller, const std::string& id) {
  if (id.empty()) return InvalidField("id", "is required");
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobRecord job, store_->GetJob(id));
  RETURN_IF_ERROR(CheckAccess(job, caller));
  ShowReason(job);
  job.stopping = job.state == JobState::kCancelled && AttemptStillHeld(job);
  return job;
}

absl::StatusOr<JobPage> JobManager::ListJobs(const Identity& caller,
                                             const std::vector<JobState>& states, int page_size,
                                             const std::string& page_token, bool with_spec,
                                             const std::string& user) {
  if (page_size < 0) {
    return InvalidField("page_size", absl::StrCat("must not be negative (got ", page_size, ")"));
  }
  if (page_size == 0) page_size = kDefaultPageSize;
  page_size = std::min(page_size, kMaxPageSize);
  int64_t before = 0;
  if (!page_token.empty()) {
    ASSIGN_OR_RETURN(before, ParsePageToken(page_token));
  }
  for (JobState state : states) {
    if (state == JobState::kUnspecified) {
      return InvalidField("states", "JOB_STATE_UNSPECIFIED is not a state to filter by");
    }
  }
  absl::MutexLock lock(&mu_);
  if (!user.empty() && !caller.is_admin() && user != caller.name) {
    return absl::PermissionDeniedError("user: only an admin lists other users' jobs");
  }
  std::optional<std::string> owner;
  if (!caller.is_admin()) {
    owner = caller.name;
  } else if (!user.empty()) {
    owner = user;
  }
  ASSIGN_OR_RETURN(std::vector<JobRecord> jobs,
                   store_->ListJobs(states, before, page_size + 1, with_spec, owner));
  for (JobRecord& job : jobs) ShowReason(job);
  JobPage page;
  if (static_cast<int>(jobs.size()) > page_size) {
    jobs.resize(page_size);
    page.next_page_token = PageToken(jobs.back().seq);
  }
  page.jobs = std::move(jobs);
  return page;
}

absl::StatusOr<JobRecord> JobManager::Cancel(const Identity& caller, const std::string& id,
                                             const std::string& reason) {
  if (id.empty()) return InvalidField("id", "is required");
  if (reason.size() > kMaxTextLength) return InvalidField("reason", "is too long");
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobRecord job, store_->GetJob(id));
  RETURN_IF_ERROR(CheckAccess(job, caller));
  if (IsTerminal(job.state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " already finished (", JobStateName(job.state),
                     "); only PENDING, SCHEDULED, RUNNING or RETRYING jobs can be cancelled"));
  }
  const JobState before = job.state;
  Change change;
  AddTransition(
      job, change, JobState::kCancelled,
      reason.empty() ? std::string("cancelled by the user") : absl::StrCat("cancelled: ", reason));
  RETURN_IF_ERROR(Save(job, before, std::move(change)));
  LOG(INFO) << "job " << id << " cancelled (was " << JobStateName(before) << ")";
  RunScheduler();
  return job;
}

absl::StatusOr<std::vector<JobEventRecord>> JobManager::Events(const Identity& caller,
                                                               const std::string& id,
                                                               int64_t after_sequence) {
  if (id.empty()) return InvalidField("id", "is required");
  if (after_sequence < 0) {
    return InvalidField("after_sequence",
                        absl::StrCat("must not be negative (got ", after_sequence, ")"));
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::optional<JobRecord> job, store_->FindJob(id));
  if (!job) return absl::NotFoundError(absl::StrCat("no job with id \"", id, "\""));
  RETURN_IF_ERROR(CheckAccess(*job, caller));
  return store_->ListEvents(id, after_sequence, kMaxEventsPerCall);
}

std::string JobManager::RunArea(const std::string& owner) const {
  return options_.user_areas ? owner + "/" : std::string();
}

int64_t JobManager::PendingJobsOf(const std::string& owner) const {
  return pending_.CountOf(owner);
}

std::vector<WorkerCapacity> JobManager::LiveWorkerCapacities() const {
  std::vector<WorkerCapacity> out;
  for (const auto& [id, w] : workers_) {
    if (!w.record.lost) {
      out.push_back({id, w.record.device, w.record.memory_bytes, w.record.host_memory_bytes,
                     w.record.offload_disk_bytes});
    }
  }
  return out;
}

std::vector<WorkerView> JobManager::ListWorkers(const Identity& caller) {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerView> out;
  for (const auto& [id, w] : workers_) {
    WorkerView view;
    view.record = w.record;
    view.state = w.record.lost                                  ? WorkerState::kLost
                 : w.active.empty() && !w.finishing.has_value() ? WorkerState::kIdle
                                                                : WorkerState::kBusy;
    if (!w.active.empty()) {
      const std::string& job_id = w.active.front().job_id;
      const auto live = live_.find(job_id);
      const bool visible =
          caller.is_admin() || (live != live_.end() && live->second.owner == caller.name);
      if (visible) view.job_id = job_id;
    }
    view.memory = w.memory;
    view.last_heartbeat = w.record.lost ? w.record.last_heartbeat : w.last_seen;
    out.push_back(std::move(view));
  }
  std::sort(out.begin(), out.end(),
            [](const WorkerView& a, const WorkerView& b) { return a.record.id < b.record.id; });
  return out;
}

}  // namespace sbp::server
