#include "server/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace sbp::server {
namespace {

using Json = nlohmann::json;

// Migration i (0-based) takes the schema from version i to i + 1.
constexpr const char* kMigrations[] = {
    R"sql(
CREATE TABLE jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  spec_yaml TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  attempt INTEGER NOT NULL DEFAULT 0,
  max_restarts INTEGER NOT NULL DEFAULT 0,
  priority INTEGER NOT NULL DEFAULT 0,
  world_size INTEGER NOT NULL DEFAULT 1,
  device TEXT NOT NULL DEFAULT 'cpu',
  required_memory_bytes INTEGER NOT NULL DEFAULT 0,
  request_id TEXT UNIQUE,
  revision INTEGER NOT NULL DEFAULT 0,
  failure_class TEXT NOT NULL DEFAULT '',
  last_checkpoint TEXT NOT NULL DEFAULT '',
  progress_step INTEGER NOT NULL DEFAULT 0,
  progress_json TEXT NOT NULL DEFAULT '{}',
  worker_ids TEXT NOT NULL DEFAULT '[]',
  last_event_sequence INTEGER NOT NULL DEFAULT 0,
  created_at_us INTEGER NOT NULL DEFAULT 0,
  updated_at_us INTEGER NOT NULL DEFAULT 0,
  queued_at_us INTEGER NOT NULL DEFAULT 0,
  started_at_us INTEGER NOT NULL DEFAULT 0,
  finished_at_us INTEGER NOT NULL DEFAULT 0,
  active_at_us INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_by_state ON jobs(state, seq);
CREATE TABLE job_events (
  job_id TEXT NOT NULL,
  sequence INTEGER NOT NULL,
  time_us INTEGER NOT NULL,
  from_state TEXT NOT NULL,
  to_state TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  message TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, sequence)
) WITHOUT ROWID;
CREATE TABLE assignments (
  job_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  worker_id TEXT NOT NULL,
  active INTEGER NOT NULL DEFAULT 1,
  outcome TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, attempt, rank)
) WITHOUT ROWID;
CREATE INDEX assignments_active ON assignments(active, worker_id);
CREATE TABLE workers (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  device TEXT NOT NULL,
  memory_bytes INTEGER NOT NULL,
  version TEXT NOT NULL DEFAULT '',
  registered_at_us INTEGER NOT NULL DEFAULT 0,
  last_heartbeat_us INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL DEFAULT 'live'
) WITHOUT ROWID;
)sql",
    // Specs move to their own table: SQLite rewrites a whole row on every
    // UPDATE, and the jobs row changes with every progress report, while a
    // spec (up to 64 KiB) never changes after the submit.
    R"sql(
CREATE TABLE job_specs (
  seq INTEGER PRIMARY KEY REFERENCES jobs(seq),
  spec_yaml TEXT NOT NULL,
  spec_json TEXT NOT NULL
);
INSERT INTO job_specs (seq, spec_yaml, spec_json) SELECT seq, spec_yaml, spec_json FROM jobs;
ALTER TABLE jobs DROP COLUMN spec_yaml;
ALTER TABLE jobs DROP COLUMN spec_json;
)sql",
    // Tenancy: a job's owner (the identity that submitted it; '' before) and
    // the identity a worker id is bound to.
    R"sql(
ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX jobs_by_owner ON jobs (owner, seq);
ALTER TABLE workers ADD COLUMN identity TEXT NOT NULL DEFAULT '';
)sql",
    // Preemption: attempts preempted so far, and the one in progress (the
    // job it stops for and until when), so that a restart mid-preemption
    // carries on with it.
    R"sql(
ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN preempted_by TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN preempt_deadline_us INTEGER NOT NULL DEFAULT 0;
)sql",
    // Request ids are scoped by owner: the column (UNIQUE) holds
    // "<owner>/<request_id>" (ScopedRequestId), so that one user can neither
    // tell whether another's id is taken nor squat it.
    R"sql(
UPDATE jobs SET request_id = owner || '/' || request_id WHERE request_id IS NOT NULL;
)sql",
    // Memory tiers: what a job needs per worker beside device memory (host
    // memory, offload disk, and other ways to run it: server/worker_need.h),
    // and what a worker offers them.
    R"sql(
ALTER TABLE jobs ADD COLUMN required_host_memory_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN required_offload_disk_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN alternative_needs TEXT NOT NULL DEFAULT '[]';
ALTER TABLE workers ADD COLUMN host_memory_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN offload_disk_bytes INTEGER NOT NULL DEFAULT 0;
)sql",
    // A job's output (server/job_output.h): metrics and log lines (kind 1,
    // 2) by attempt and rank, with the worker's number of each line; the
    // cursor orders a job's lines for streams and is never reused. Each
    // rank's state: the next line number expected (retried batches are
    // skipped), what is kept, what was dropped, the metrics' stride.
    R"sql(
CREATE TABLE job_output (
  cursor INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL,
  kind INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  line_no INTEGER NOT NULL,
  step INTEGER NOT NULL DEFAULT 0,
  time_us INTEGER NOT NULL,
  text TEXT NOT NULL
);
CREATE INDEX job_output_by_job ON job_output (job_id, kind, cursor);
CREATE TABLE job_output_ranks (
  job_id TEXT NOT NULL,
  kind INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  next_line INTEGER NOT NULL DEFAULT 0,
  lines INTEGER NOT NULL DEFAULT 0,
  bytes INTEGER NOT NULL DEFAULT 0,
  dropped INTEGER NOT NULL DEFAULT 0,
  stride INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY (job_id, kind, attempt, rank)
) WITHOUT ROWID;
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == Store::kSchemaVersion);

// The columns of `jobs` (j) in RowToJob's order; the spec columns of
// `job_specs` (s) follow when a query reads them.
constexpr char kJobColumns[] =
    "j.seq, j.id, j.name, j.state, j.reason, j.attempt, j.max_restarts, j.priority, "
    "j.world_size, j.device, j.required_memory_bytes, j.request_id, j.revision, "
    "j.failure_class, j.last_checkpoint, j.progress_step, j.progress_json, j.worker_ids, "
    "j.last_event_sequence, j.created_at_us, j.updated_at_us, j.queued_at_us, "
    "j.started_at_us, j.finished_at_us, j.active_at_us, j.owner, j.preemptions, j.preempted_by, "
    "j.preempt_deadline_us, j.required_host_memory_bytes, j.required_offload_disk_bytes, "
    "j.alternative_needs";
constexpr char kSpecColumns[] = ", s.spec_yaml, s.spec_json";
constexpr char kJobsWithSpecs[] = " FROM jobs j LEFT JOIN job_specs s ON s.seq = j.seq";
constexpr char kJobsOnly[] = " FROM jobs j";

int64_t ToMicros(absl::Time t) { return absl::ToUnixMicros(t); }
absl::Time FromMicros(int64_t us) { return absl::FromUnixMicros(us); }

// Rows hold DeviceKindName's spelling; anything else reads as the CPU.
DeviceKind ParseDevice(absl::string_view text) {
  return DeviceKindFromName(text).value_or(DeviceKind::kCpu);
}

// JSON has no NaN or infinity; store them as null and read null back as NaN.
Json Number(double value) { return std::isfinite(value) ? Json(value) : Json(nullptr); }

double ReadDouble(const Json& j, const char* key, double fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (it->is_number()) return it->get<double>();
  return std::numeric_limits<double>::quiet_NaN();
}

int64_t ReadInt(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : 0;
}

std::string ProgressToJson(const ProgressRecord& p) {
  Json j = {{"step", p.step},
            {"total_steps", p.total_steps},
            {"loss", Number(p.loss)},
            {"learning_rate", Number(p.learning_rate)},
            {"grad_norm", Number(p.grad_norm)},
            {"tokens_per_second", Number(p.tokens_per_second)},
            {"tokens_total", p.tokens_total},
            {"mfu", Number(p.mfu)},
            {"peak_bytes", p.peak_bytes},
            {"current_bytes", p.current_bytes},
            {"step_seconds", Number(p.step_seconds)},
            {"eta_seconds", Number(p.eta_seconds)},
            {"eval_loss", Number(p.eval_loss)},
            {"eval_step", p.eval_step},
            {"updated_at_us", ToMicros(p.updated_at)}};
  // The memory tiers, once a step reported them.
  if (!p.checkpoint_tier.empty() || p.optimizer_offload) {
    j["checkpoint_tier"] = p.checkpoint_tier;
    j["optimizer_offload"] = p.optimizer_offload;
    j["host_tier_bytes"] = p.host_tier_bytes;
    j["host_tier_peak_bytes"] = p.host_tier_peak_bytes;
    j["disk_tier_bytes"] = p.disk_tier_bytes;
    j["offload_copy_bytes_per_second"] = Number(p.offload_copy_bytes_per_second);
    j["offload_wait_seconds"] = Number(p.offload_wait_seconds);
  }
  // Online GRPO's rollouts, for jobs that sample online.
  if (p.rollout.has_value()) {
    const RolloutProgressRecord& r = *p.rollout;
    j["rollout"] = {{"reward_mean", Number(r.reward_mean)},
                    {"reward_std", Number(r.reward_std)},
                    {"completion_length_mean", Number(r.completion_length_mean)},
                    {"completion_length_max", r.completion_length_max},
                    {"truncated_fraction", Number(r.truncated_fraction)},
                    {"rollout_tokens_per_second", Number(r.rollout_tokens_per_second)},
                    {"rollout_seconds", Number(r.rollout_seconds)},
                    {"train_seconds", Number(r.train_seconds)}};
  }
  return j.dump();
}

ProgressRecord ProgressFromJson(const std::string& text) {
  ProgressRecord p;
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return p;
  p.step = ReadInt(j, "step");
  p.total_steps = ReadInt(j, "total_steps");
  p.loss = ReadDouble(j, "loss", 0);
  p.learning_rate = ReadDouble(j, "learning_rate", 0);
  p.grad_norm = ReadDouble(j, "grad_norm", 0);
  p.tokens_per_second = ReadDouble(j, "tokens_per_second", 0);
  p.tokens_total = ReadInt(j, "tokens_total");
  p.mfu = ReadDouble(j, "mfu", 0);
  p.peak_bytes = ReadInt(j, "peak_bytes");
  p.current_bytes = ReadInt(j, "current_bytes");
  p.step_seconds = ReadDouble(j, "step_seconds", 0);
  p.eta_seconds = ReadDouble(j, "eta_seconds", -1);
  p.eval_loss = ReadDouble(j, "eval_loss", 0);
  p.eval_step = ReadInt(j, "eval_step");
  p.updated_at = FromMicros(ReadInt(j, "updated_at_us"));
  if (auto tier = j.find("checkpoint_tier"); tier != j.end() && tier->is_string()) {
    p.checkpoint_tier = tier->get<std::string>();
  }
  if (auto offload = j.find("optimizer_offload"); offload != j.end() && offload->is_boolean()) {
    p.optimizer_offload = offload->get<bool>();
  }
  p.host_tier_bytes = ReadInt(j, "host_tier_bytes");
  p.host_tier_peak_bytes = ReadInt(j, "host_tier_peak_bytes");
  p.disk_tier_bytes = ReadInt(j, "disk_tier_bytes");
  p.offload_copy_bytes_per_second = ReadDouble(j, "offload_copy_bytes_per_second", 0);
  p.offload_wait_seconds = ReadDouble(j, "offload_wait_seconds", 0);
  // Rows written before the rollout figures (or for other jobs) have none.
  if (auto rollout = j.find("rollout"); rollout != j.end() && rollout->is_object()) {
    const Json& r = *rollout;
    p.rollout = RolloutProgressRecord{ReadDouble(r, "reward_mean", 0),
                                      ReadDouble(r, "reward_std", 0),
                                      ReadDouble(r, "completion_length_mean", 0),
                                      ReadInt(r, "completion_length_max"),
                                      ReadDouble(r, "truncated_fraction", 0),
                                      ReadDouble(r, "rollout_tokens_per_second", 0),
                                      ReadDouble(r, "rollout_seconds", 0),
                                      ReadDouble(r, "train_seconds", 0)};
  }
  return p;
}

std::string StringsToJson(const std::vector<std::string>& values) { return Json(values).dump(); }

std::vector<std::string> StringsFromJson(const std::string& text) {
  std::vector<std::string> out;
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return out;
  for (const Json& v : j) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

absl::StatusOr<JobRecord> RowToJob(const sqlite::Statement& s, bool with_spec) {
  JobRecord job;
  int c = 0;
  job.seq = s.ColumnInt(c++);
  job.id = s.ColumnText(c++);
  job.name = s.ColumnText(c++);
  ASSIGN_OR_RETURN(job.state, ParseJobState(s.ColumnText(c++)));
  job.reason = s.ColumnText(c++);
  job.attempt = static_cast<int>(s.ColumnInt(c++));
  job.max_restarts = static_cast<int>(s.ColumnInt(c++));
  job.priority = static_cast<int>(s.ColumnInt(c++));
  job.world_size = static_cast<int>(s.ColumnInt(c++));
  job.device = ParseDevice(s.ColumnText(c++));
  job.required_memory_bytes = s.ColumnInt(c++);
  job.request_id = s.ColumnText(c++);
  absl::string_view request_id_scope = job.request_id;
  job.revision = s.ColumnInt(c++);
  ASSIGN_OR_RETURN(job.failure_class, ParseFailureClass(s.ColumnText(c++)));
  job.last_checkpoint = s.ColumnText(c++);
  c++;  // progress_step duplicates progress_json.step for queries
  job.progress = ProgressFromJson(s.ColumnText(c++));
  job.worker_ids = StringsFromJson(s.ColumnText(c++));
  job.last_event_sequence = s.ColumnInt(c++);
  job.created_at = FromMicros(s.ColumnInt(c++));
  job.updated_at = FromMicros(s.ColumnInt(c++));
  job.queued_at = FromMicros(s.ColumnInt(c++));
  job.started_at = FromMicros(s.ColumnInt(c++));
  job.finished_at = FromMicros(s.ColumnInt(c++));
  job.active_at = FromMicros(s.ColumnInt(c++));
  job.owner = s.ColumnText(c++);
  // Stored scoped by owner (ScopedRequestId); the owner's own id is shown.
  if (absl::ConsumePrefix(&request_id_scope, absl::StrCat(job.owner, "/"))) {
    job.request_id = std::string(request_id_scope);
  }
  job.preemptions = static_cast<int>(s.ColumnInt(c++));
  job.preempted_by = s.ColumnText(c++);
  job.preempt_deadline = FromMicros(s.ColumnInt(c++));
  job.required_host_memory_bytes = s.ColumnInt(c++);
  job.required_offload_disk_bytes = s.ColumnInt(c++);
  job.alternative_needs = NeedsFromJson(s.ColumnText(c++));
  if (with_spec) {
    job.spec_yaml = s.ColumnText(c++);
    job.spec_json = s.ColumnText(c++);
  }
  return job;
}

// The stored form of a request id: "<owner>/<request_id>" (owners are names
// without '/', server/identity.h), unique across owners while each owner
// has the whole namespace of ids.
std::string ScopedRequestId(absl::string_view owner, absl::string_view request_id) {
  return absl::StrCat(owner, "/", request_id);
}

// Binds the columns of `jobs` but seq, from index 1, in kJobColumns order.
void BindJob(sqlite::Statement& s, const JobRecord& job) {
  int i = 1;
  s.Bind(i++, job.id);
  s.Bind(i++, job.name);
  s.Bind(i++, JobStateName(job.state));
  s.Bind(i++, job.reason);
  s.Bind(i++, int64_t{job.attempt});
  s.Bind(i++, int64_t{job.max_restarts});
  s.Bind(i++, int64_t{job.priority});
  s.Bind(i++, int64_t{job.world_size});
  s.Bind(i++, DeviceKindName(job.device));
  s.Bind(i++, job.required_memory_bytes);
  if (job.request_id.empty()) {
    s.BindNull(i++);
  } else {
    s.Bind(i++, ScopedRequestId(job.owner, job.request_id));
  }
  s.Bind(i++, job.revision);
  s.Bind(i++, FailureClassName(job.failure_class));
  s.Bind(i++, job.last_checkpoint);
  s.Bind(i++, job.progress.step);
  s.Bind(i++, ProgressToJson(job.progress));
  s.Bind(i++, StringsToJson(job.worker_ids));
  s.Bind(i++, job.last_event_sequence);
  s.Bind(i++, ToMicros(job.created_at));
  s.Bind(i++, ToMicros(job.updated_at));
  s.Bind(i++, ToMicros(job.queued_at));
  s.Bind(i++, ToMicros(job.started_at));
  s.Bind(i++, ToMicros(job.finished_at));
  s.Bind(i++, ToMicros(job.active_at));
  // The owner is fixed at the submit: InsertJob binds it (?25), UpdateJob never;
  // so are the memory tiers' needs (?29 - ?31).
  s.Bind(26, int64_t{job.preemptions});
  s.Bind(27, job.preempted_by);
  s.Bind(28, ToMicros(job.preempt_deadline));
}

AssignmentRecord RowToAssignment(const sqlite::Statement& s) {
  AssignmentRecord a;
  a.job_id = s.ColumnText(0);
  a.attempt = static_cast<int>(s.ColumnInt(1));
  a.rank = static_cast<int>(s.ColumnInt(2));
  a.worker_id = s.ColumnText(3);
  a.active = s.ColumnInt(4) != 0;
  a.outcome = s.ColumnText(5);
  return a;
}

// Takes `<path>.lock` for this process: flock(2), so the kernel lets go of it
// when the process ends in any way, crash included; a second coordinator on
// the same database is refused here instead of interleaving writes with the
// first. The holder's pid is written into the file for the message.
absl::StatusOr<int> LockDatabase(const std::string& path) {
  const std::string lock_path = path + ".lock";
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open the lock file ", lock_path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char holder[32] = {};
    const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
    close(fd);
    if (error != EWOULDBLOCK) {
      return absl::UnavailableError(
          absl::StrCat("cannot lock ", lock_path, ": ", std::strerror(error)));
    }
    std::string pid(holder, n > 0 ? static_cast<size_t>(n) : 0);
    pid.erase(std::remove_if(pid.begin(), pid.end(), [](char c) { return c < '0' || c > '9'; }),
              pid.end());
    return absl::FailedPreconditionError(
        absl::StrCat("the database ", path, " is in use by another sbp-coordinator",
                     pid.empty() ? "" : absl::StrCat(" (pid ", pid, ")"), ", which holds ",
                     lock_path, "; stop it first, or give this one another --db"));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // Only the message of a later refusal loses the pid; the lock holds.
  }
  return fd;
}

}  // namespace

Store::~Store() {
  statements_.clear();
  db_.reset();
  if (lock_fd_ >= 0) close(lock_fd_);
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("database path is empty");
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("creating the directory ", parent.string(), ": ", error.message()));
  }
  ASSIGN_OR_RETURN(int lock_fd, LockDatabase(path));
  absl::StatusOr<std::unique_ptr<sqlite::Database>> db = sqlite::Database::Open(path);
  if (!db.ok()) {
    close(lock_fd);
    return db.status();
  }
  std::unique_ptr<Store> store(new Store(*std::move(db), lock_fd));
  RETURN_IF_ERROR(Annotate(store->Configure(), absl::StrCat("opening ", path)));
  RETURN_IF_ERROR(Annotate(store->Migrate(), absl::StrCat("migrating ", path)));
  return store;
}

absl::Status Store::Configure() {
  // busy_timeout first: another process may hold the file briefly.
  RETURN_IF_ERROR(db_->Exec("PRAGMA busy_timeout = 5000"));
  ASSIGN_OR_RETURN(sqlite::Statement wal,
                   db_->Prepare("PRAGMA journal_mode = WAL", "setting the WAL journal mode"));
  ASSIGN_OR_RETURN(bool row, wal.Step());
  if (!row || wal.ColumnText(0) != "wal") {
    return absl::FailedPreconditionError(
        absl::StrCat("the database cannot use WAL journaling (got \"",
                     row ? wal.ColumnText(0) : std::string(), "\")"));
  }
  RETURN_IF_ERROR(db_->Exec("PRAGMA synchronous = FULL"));
  return db_->Exec("PRAGMA foreign_keys = ON");
}

absl::StatusOr<int> Store::SchemaVersion() {
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                            "name = 'schema_version'",
                            "looking up the schema version table"));
  ASSIGN_OR_RETURN(bool row, s->Step());
  const bool has_table = row && s->ColumnInt(0) != 0;
  s->Reset();
  if (!has_table) return 0;
  ASSIGN_OR_RETURN(sqlite::Statement * v, Prepared("SELECT max(version) FROM schema_version",
                                                   "reading the schema version"));
  ASSIGN_OR_RETURN(row, v->Step());
  const int version = row ? static_cast<int>(v->ColumnInt(0)) : 0;
  v->Reset();
  return version;
}

absl::Status Store::Migrate() {
  ASSIGN_OR_RETURN(sqlite::Transaction tx, Begin());
  RETURN_IF_ERROR(
      db_->Exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, "
                "applied_at_us INTEGER NOT NULL)"));
  ASSIGN_OR_RETURN(int version, SchemaVersion());
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("database schema version ", version, " is newer than this coordinator's (",
                     kSchemaVersion, "); use a newer sbp-coordinator"));
  }
  for (int v = version; v < kSchemaVersion; ++v) {
    RETURN_IF_ERROR(
        Annotate(db_->Exec(kMigrations[v]), absl::StrCat("schema migration ", v, " -> ", v + 1)));
    ASSIGN_OR_RETURN(sqlite::Statement * s,
                     Prepared("INSERT INTO schema_version (version, applied_at_us) VALUES (?, ?)",
                              "recording the schema version"));
    s->Bind(1, int64_t{v + 1}).Bind(2, ToMicros(absl::Now()));
    RETURN_IF_ERROR(s->Run());
  }
  return tx.Commit();
}

absl::StatusOr<sqlite::Transaction> Store::Begin() { return sqlite::Transaction::Begin(db_.get()); }

absl::StatusOr<sqlite::Statement*> Store::Prepared(absl::string_view sql, absl::string_view what) {
  auto it = statements_.find(sql);
  if (it == statements_.end()) {
    ASSIGN_OR_RETURN(sqlite::Statement s, db_->Prepare(sql, what));
    it = statements_.emplace(std::string(sql), std::make_unique<sqlite::Statement>(std::move(s)))
             .first;
  }
  it->second->Reset();
  return it->second.get();
}

absl::StatusOr<std::vector<JobRecord>> Store::QueryJobs(sqlite::Statement& stmt, bool with_spec) {
  std::vector<JobRecord> jobs;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    ASSIGN_OR_RETURN(JobRecord job, RowToJob(stmt, with_spec));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::StatusOr<int64_t> Store::InsertJob(const JobRecord& job) {
  static const std::string sql =
      "INSERT INTO jobs (id, name, state, reason, attempt, max_restarts, priority, world_size, "
      "device, required_memory_bytes, request_id, revision, failure_class, last_checkpoint, "
      "progress_step, progress_json, worker_ids, last_event_sequence, created_at_us, "
      "updated_at_us, queued_at_us, started_at_us, finished_at_us, active_at_us, owner, "
      "preemptions, preempted_by, preempt_deadline_us, required_host_memory_bytes, "
      "required_offload_disk_bytes, alternative_needs) VALUES "
      "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, "
      "?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31)";
  // Both rows or neither, inside the caller's transaction or not.
  RETURN_IF_ERROR(db_->Exec("SAVEPOINT insert_job"));
  absl::StatusOr<int64_t> seq = [&]() -> absl::StatusOr<int64_t> {
    ASSIGN_OR_RETURN(sqlite::Statement * s, Prepared(sql, "inserting a job"));
    BindJob(*s, job);
    s->Bind(25, job.owner);
    s->Bind(29, job.required_host_memory_bytes);
    s->Bind(30, job.required_offload_disk_bytes);
    s->Bind(31, NeedsToJson(job.alternative_needs));
    RETURN_IF_ERROR(s->Run());
    const int64_t seq = sqlite3_last_insert_rowid(db_->handle());
    ASSIGN_OR_RETURN(sqlite::Statement * spec,
                     Prepared("INSERT INTO job_specs (seq, spec_yaml, spec_json) VALUES (?, ?, ?)",
                              "inserting a job's spec"));
    spec->Bind(1, seq).Bind(2, job.spec_yaml).Bind(3, job.spec_json);
    RETURN_IF_ERROR(spec->Run());
    return seq;
  }();
  if (!seq.ok()) {
    db_->Exec("ROLLBACK TO insert_job").IgnoreError();
    db_->Exec("RELEASE insert_job").IgnoreError();
    return seq.status();
  }
  RETURN_IF_ERROR(db_->Exec("RELEASE insert_job"));
  return seq;
}

absl::Status Store::UpdateJob(const JobRecord& job) {
  // The fields that change over a job's life. Not the spec, which lives in
  // job_specs so that this write stays small, nor what else is fixed at the
  // submit (name, request_id, created_at): setting a column, even to its old
  // value, makes SQLite rewrite the index entries over it.
  static const std::string sql =
      "UPDATE jobs SET state = ?3, reason = ?4, attempt = ?5, max_restarts = ?6, priority = ?7, "
      "world_size = ?8, device = ?9, required_memory_bytes = ?10, revision = ?12, "
      "failure_class = ?13, last_checkpoint = ?14, progress_step = ?15, progress_json = ?16, "
      "worker_ids = ?17, last_event_sequence = ?18, updated_at_us = ?20, queued_at_us = ?21, "
      "started_at_us = ?22, finished_at_us = ?23, active_at_us = ?24, preemptions = ?26, "
      "preempted_by = ?27, preempt_deadline_us = ?28 WHERE id = ?1";
  ASSIGN_OR_RETURN(sqlite::Statement * s, Prepared(sql, "updating a job"));
  BindJob(*s, job);
  RETURN_IF_ERROR(s->Run());
  if (db_->Changes() == 0) return absl::NotFoundError(absl::StrCat("no job ", job.id));
  return absl::OkStatus();
}

absl::Status Store::UpdateJobReason(absl::string_view id, absl::string_view reason,
                                    absl::Time updated_at) {
  static const std::string sql =
      "UPDATE jobs SET reason = ?2, revision = revision + 1, updated_at_us = ?3 WHERE id = ?1";
  ASSIGN_OR_RETURN(sqlite::Statement * s, Prepared(sql, "updating a job's reason"));
  s->Bind(1, id);
  s->Bind(2, reason);
  s->Bind(3, ToMicros(updated_at));
  RETURN_IF_ERROR(s->Run());
  if (db_->Changes() == 0) return absl::NotFoundError(absl::StrCat("no job ", id));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<JobRecord>> Store::FindJob(absl::string_view id) {
  static const std::string sql =
      absl::StrCat("SELECT ", kJobColumns, kSpecColumns, kJobsWithSpecs, " WHERE j.id = ?");
  ASSIGN_OR_RETURN(sqlite::Statement * s, Prepared(sql, "reading a job"));
  s->Bind(1, id);
  ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, QueryJobs(*s, /*with_spec=*/true));
  if (jobs.empty()) return std::nullopt;
  return std::move(jobs.front());
}

absl::StatusOr<JobRecord> Store::GetJob(absl::string_view id) {
  ASSIGN_OR_RETURN(std::optional<JobRecord> job, FindJob(id));
  if (!job) return absl::NotFoundError(absl::StrCat("no job with id \"", id, "\""));
  return std::move(*job);
}

absl::StatusOr<std::optional<JobRecord>> Store::FindJobByRequestId(absl::string_view owner,
                                                                   absl::string_view request_id) {
  static const std::string sql =
      absl::StrCat("SELECT ", kJobColumns, kSpecColumns, kJobsWithSpecs, " WHERE j.request_id = ?");
  ASSIGN_OR_RETURN(sqlite::Statement * s, Prepared(sql, "looking up a request id"));
  s->Bind(1, ScopedRequestId(owner, request_id));
  ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, QueryJobs(*s, /*with_spec=*/true));
  if (jobs.empty()) return std::nullopt;
  return std::move(jobs.front());
}

absl::StatusOr<std::vector<JobRecord>> Store::ListJobs(std::vector<JobState> states,
                                                       int64_t before_seq, int limit,
                                                       bool with_spec,
                                                       std::optional<std::string> owner) {
  // One statement per set of states, however the caller ordered them.
  std::sort(states.begin(), states.end());
  states.erase(std::unique(states.begin(), states.end()), states.end());
  std::string sql = with_spec ? absl::StrCat("SELECT ", kJobColumns, kSpecColumns, kJobsWithSpecs)
                              : absl::StrCat("SELECT ", kJobColumns, kJobsOnly);
  absl::StrAppend(&sql, " WHERE j.seq < ?");
  if (owner.has_value()) absl::StrAppend(&sql, " AND j.owner = ?");
  if (!states.empty()) {
    std::vector<std::string> marks(states.size(), "?");
    absl::StrAppend(&sql, " AND j.state IN (", absl::StrJoin(marks, ", "), ")");
  }
  absl::StrAppend(&sql, " ORDER BY j.seq DESC LIMIT ?");
  ASSIGN_OR_RETURN(sqlite::Statement * s, Prepared(sql, "listing jobs"));
  int i = 1;
  s->Bind(i++, before_seq > 0 ? before_seq : std::numeric_limits<int64_t>::max());
  if (owner.has_value()) s->Bind(i++, *owner);
  for (JobState state : states) s->Bind(i++, JobStateName(state));
  s->Bind(i++, int64_t{limit});
  return QueryJobs(*s, with_spec);
}

absl::StatusOr<std::vector<JobRecord>> Store::ActiveJobs() {
  static const std::string sql =
      absl::StrCat("SELECT ", kJobColumns, kSpecColumns, kJobsWithSpecs,
                   " WHERE j.state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') "
                   "ORDER BY j.seq ASC");
  ASSIGN_OR_RETURN(sqlite::Statement * s, Prepared(sql, "loading active jobs"));
  return QueryJobs(*s, /*with_spec=*/true);
}

absl::StatusOr<std::map<JobState, int64_t>> Store::CountJobsByState() {
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("SELECT state, count(*) FROM jobs GROUP BY state", "counting jobs"));
  std::map<JobState, int64_t> counts;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) break;
    ASSIGN_OR_RETURN(JobState state, ParseJobState(s->ColumnText(0)));
    counts[state] = s->ColumnInt(1);
  }
  return counts;
}

absl::StatusOr<std::vector<Store::RemovedJob>> Store::RemoveEndedJobs(absl::Time ended_before,
                                                                      int64_t keep_per_owner,
                                                                      int64_t batch) {
  std::vector<RemovedJob> removed;
  if (batch <= 0 || (ended_before == absl::InfinitePast() && keep_per_owner <= 0)) return removed;
  // Ended jobs ranked newest first within their owner; those too old or past
  // the owner's count go.
  static const std::string select =
      "SELECT seq, id, owner, state, "
      "length(CAST(spec_yaml AS BLOB)) + length(CAST(spec_json AS BLOB)) "
      "FROM (SELECT j.seq, j.id, j.owner, j.state, j.finished_at_us, s.spec_yaml, s.spec_json, "
      "ROW_NUMBER() OVER (PARTITION BY j.owner ORDER BY j.finished_at_us DESC, j.seq DESC) AS n "
      "FROM jobs j JOIN job_specs s ON s.seq = j.seq "
      "WHERE j.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')) "
      "WHERE (?1 != 0 AND finished_at_us < ?1) OR (?2 > 0 AND n > ?2) LIMIT ?3";
  ASSIGN_OR_RETURN(sqlite::Transaction tx, Begin());
  std::vector<int64_t> seqs;
  {
    ASSIGN_OR_RETURN(sqlite::Statement * s, Prepared(select, "finding jobs past retention"));
    s->Bind(1, ended_before == absl::InfinitePast() ? int64_t{0} : ToMicros(ended_before))
        .Bind(2, keep_per_owner)
        .Bind(3, batch);
    while (true) {
      ASSIGN_OR_RETURN(bool row, s->Step());
      if (!row) break;
      seqs.push_back(s->ColumnInt(0));
      ASSIGN_OR_RETURN(const JobState state, ParseJobState(s->ColumnText(3)));
      removed.push_back({s->ColumnText(1), s->ColumnText(2), state, s->ColumnInt(4)});
    }
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::string& id = removed[i].id;
    for (const char* sql :
         {"DELETE FROM job_events WHERE job_id = ?1", "DELETE FROM assignments WHERE job_id = ?1",
          "DELETE FROM job_output WHERE job_id = ?1",
          "DELETE FROM job_output_ranks WHERE job_id = ?1"}) {
      ASSIGN_OR_RETURN(sqlite::Statement * d, Prepared(sql, "removing a job's history"));
      d->Bind(1, id);
      RETURN_IF_ERROR(d->Run());
    }
    for (const char* sql :
         {"DELETE FROM job_specs WHERE seq = ?1", "DELETE FROM jobs WHERE seq = ?1"}) {
      ASSIGN_OR_RETURN(sqlite::Statement * d, Prepared(sql, "removing a job"));
      d->Bind(1, seqs[i]);
      RETURN_IF_ERROR(d->Run());
    }
  }
  RETURN_IF_ERROR(tx.Commit());
  return removed;
}

absl::StatusOr<std::map<std::string, int64_t>> Store::SpecBytesByOwner() {
  ASSIGN_OR_RETURN(
      sqlite::Statement * s,
      Prepared("SELECT j.owner, sum(length(CAST(s.spec_yaml AS BLOB)) + "
               "length(CAST(s.spec_json AS BLOB))) FROM jobs j JOIN job_specs s ON s.seq = j.seq "
               "GROUP BY j.owner",
               "summing spec bytes"));
  std::map<std::string, int64_t> bytes;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) break;
    bytes[s->ColumnText(0)] = s->ColumnInt(1);
  }
  return bytes;
}

absl::Status Store::AppendEvent(const JobEventRecord& event) {
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("INSERT INTO job_events (job_id, sequence, time_us, from_state, "
                            "to_state, attempt, reason, message) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            "appending a job event"));
  s->Bind(1, event.job_id)
      .Bind(2, event.sequence)
      .Bind(3, ToMicros(event.time))
      .Bind(4, JobStateName(event.from_state))
      .Bind(5, JobStateName(event.to_state))
      .Bind(6, int64_t{event.attempt})
      .Bind(7, event.reason)
      .Bind(8, event.message);
  return s->Run();
}

absl::StatusOr<std::vector<JobEventRecord>> Store::ListEvents(absl::string_view job_id,
                                                              int64_t after_sequence, int limit) {
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("SELECT sequence, time_us, from_state, to_state, attempt, reason, "
                            "message FROM job_events WHERE job_id = ? AND sequence > ? "
                            "ORDER BY sequence ASC LIMIT ?",
                            "listing job events"));
  s->Bind(1, job_id).Bind(2, after_sequence).Bind(3, int64_t{limit});
  std::vector<JobEventRecord> events;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) break;
    JobEventRecord e;
    e.job_id = std::string(job_id);
    e.sequence = s->ColumnInt(0);
    e.time = FromMicros(s->ColumnInt(1));
    ASSIGN_OR_RETURN(e.from_state, ParseJobState(s->ColumnText(2)));
    ASSIGN_OR_RETURN(e.to_state, ParseJobState(s->ColumnText(3)));
    e.attempt = static_cast<int>(s->ColumnInt(4));
    e.reason = s->ColumnText(5);
    e.message = s->ColumnText(6);
    events.push_back(std::move(e));
  }
  return events;
}

absl::Status Store::InsertAssignment(const AssignmentRecord& a) {
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("INSERT INTO assignments (job_id, attempt, rank, worker_id, active, "
                            "outcome) VALUES (?, ?, ?, ?, ?, ?)",
                            "inserting an assignment"));
  s->Bind(1, a.job_id)
      .Bind(2, int64_t{a.attempt})
      .Bind(3, int64_t{a.rank})
      .Bind(4, a.worker_id)
      .Bind(5, int64_t{a.active ? 1 : 0})
      .Bind(6, a.outcome);
  return s->Run();
}

absl::Status Store::UpdateAssignment(const AssignmentRecord& a) {
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("UPDATE assignments SET worker_id = ?, active = ?, outcome = ? "
                            "WHERE job_id = ? AND attempt = ? AND rank = ?",
                            "updating an assignment"));
  s->Bind(1, a.worker_id)
      .Bind(2, int64_t{a.active ? 1 : 0})
      .Bind(3, a.outcome)
      .Bind(4, a.job_id)
      .Bind(5, int64_t{a.attempt})
      .Bind(6, int64_t{a.rank});
  RETURN_IF_ERROR(s->Run());
  if (db_->Changes() == 0) {
    return absl::NotFoundError(
        absl::StrCat("no assignment ", a.job_id, "/", a.attempt, " rank ", a.rank));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<AssignmentRecord>> Store::ActiveAssignments() {
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("SELECT job_id, attempt, rank, worker_id, active, outcome FROM "
                            "assignments WHERE active = 1 ORDER BY job_id, attempt, rank",
                            "loading active assignments"));
  std::vector<AssignmentRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) break;
    out.push_back(RowToAssignment(*s));
  }
  return out;
}

absl::StatusOr<std::vector<AssignmentRecord>> Store::Assignments(absl::string_view job_id,
                                                                 int attempt) {
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("SELECT job_id, attempt, rank, worker_id, active, outcome FROM "
                            "assignments WHERE job_id = ? AND attempt = ? ORDER BY rank",
                            "reading assignments"));
  s->Bind(1, job_id).Bind(2, int64_t{attempt});
  std::vector<AssignmentRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) break;
    out.push_back(RowToAssignment(*s));
  }
  return out;
}

absl::Status Store::UpsertWorker(const WorkerRecord& w) {
  ASSIGN_OR_RETURN(
      sqlite::Statement * s,
      Prepared("INSERT INTO workers (id, name, device, memory_bytes, version, registered_at_us, "
               "last_heartbeat_us, state, identity, host_memory_bytes, offload_disk_bytes) "
               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) "
               "ON CONFLICT (id) DO UPDATE SET name = ?2, device = ?3, memory_bytes = ?4, "
               "version = ?5, registered_at_us = ?6, last_heartbeat_us = ?7, state = ?8, "
               "identity = ?9, host_memory_bytes = ?10, offload_disk_bytes = ?11",
               "saving a worker"));
  s->Bind(1, w.id)
      .Bind(2, w.name)
      .Bind(3, DeviceKindName(w.device))
      .Bind(4, w.memory_bytes)
      .Bind(5, w.version)
      .Bind(6, ToMicros(w.registered_at))
      .Bind(7, ToMicros(w.last_heartbeat))
      .Bind(8, absl::string_view(w.lost ? "lost" : "live"))
      .Bind(9, w.identity)
      .Bind(10, w.host_memory_bytes)
      .Bind(11, w.offload_disk_bytes);
  return s->Run();
}

absl::StatusOr<std::vector<WorkerRecord>> Store::ListWorkers() {
  ASSIGN_OR_RETURN(sqlite::Statement * s,
                   Prepared("SELECT id, name, device, memory_bytes, version, registered_at_us, "
                            "last_heartbeat_us, state, identity, host_memory_bytes, "
                            "offload_disk_bytes FROM workers ORDER BY id",
                            "listing workers"));
  std::vector<WorkerRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) break;
    WorkerRecord w;
    w.id = s->ColumnText(0);
    w.name = s->ColumnText(1);
    w.device = ParseDevice(s->ColumnText(2));
    w.memory_bytes = s->ColumnInt(3);
    w.version = s->ColumnText(4);
    w.registered_at = FromMicros(s->ColumnInt(5));
    w.last_heartbeat = FromMicros(s->ColumnInt(6));
    w.lost = s->ColumnText(7) == "lost";
    w.identity = s->ColumnText(8);
    w.host_memory_bytes = s->ColumnInt(9);
    w.offload_disk_bytes = s->ColumnInt(10);
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace sbp::server
