// The coordinator's durable state in one SQLite file: WAL journal,
// synchronous=FULL, a versioned schema migrated on open. One process at a
// time: Open takes an exclusive flock on `<path>.lock`, held until the Store
// is destroyed or the process ends. Writes happen inside
// a transaction from Begin() so that a state change and its event row commit
// together. The store maps rows to the plain records of records.h and nothing
// more; it is not thread-safe (the job manager serializes access).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/job_output.h"
#include "server/records.h"
#include "server/sqlite.h"

namespace sbp::server {

class Store {
 public:
  // The schema version this build writes.
  static constexpr int kSchemaVersion = 7;

  // Opens or creates the database at `path` (and its directory) and migrates
  // it to kSchemaVersion. FailedPrecondition naming the file when another
  // Store (in any process) has it open.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  absl::StatusOr<int> SchemaVersion();
  absl::StatusOr<sqlite::Transaction> Begin();

  // Jobs. InsertJob fills nothing in: the caller sets every field but `seq`,
  // which it returns. A clash on id or request_id is AlreadyExists.
  absl::StatusOr<int64_t> InsertJob(const JobRecord& job);
  // By id; NotFound when absent. Writes what changes over a job's life: not
  // the spec (spec_yaml, spec_json, kept apart from the row that progress
  // rewrites), name, request_id or created_at, which InsertJob fixed.
  absl::Status UpdateJob(const JobRecord& job);
  // Only a pending job's waiting reason (revision + 1, updated_at): the
  // scheduler's batched write.
  absl::Status UpdateJobReason(absl::string_view id, absl::string_view reason,
                               absl::Time updated_at);
  absl::StatusOr<JobRecord> GetJob(absl::string_view id);
  absl::StatusOr<std::optional<JobRecord>> FindJob(absl::string_view id);
  // The job `owner` submitted with `request_id` (each owner has its own ids).
  absl::StatusOr<std::optional<JobRecord>> FindJobByRequestId(absl::string_view owner,
                                                              absl::string_view request_id);
  // Newest first: jobs with seq < before_seq (0: no bound) whose state is in
  // `states` (empty: any), at most `limit`. Without `with_spec` the specs
  // are not read (spec_yaml and spec_json stay empty).
  // `owner`: only that identity's jobs.
  absl::StatusOr<std::vector<JobRecord>> ListJobs(std::vector<JobState> states, int64_t before_seq,
                                                  int limit, bool with_spec = true,
                                                  std::optional<std::string> owner = std::nullopt);
  // Every job not SUCCEEDED, FAILED or CANCELLED, oldest first.
  absl::StatusOr<std::vector<JobRecord>> ActiveJobs();
  absl::StatusOr<std::map<JobState, int64_t>> CountJobsByState();

  // Retention: removes up to `batch` jobs that ended (SUCCEEDED, FAILED,
  // CANCELLED) before `ended_before` (InfinitePast: none for its age) or
  // that lie beyond the newest `keep_per_owner` ended jobs of their owner
  // (0: no count limit), with their specs, events, assignments and output
  // lines, in one transaction. Returns each removed job's owner, state and
  // spec bytes. Only rows: run directories are never touched.
  struct RemovedJob {
    std::string id, owner;
    JobState state = JobState::kUnspecified;
    int64_t spec_bytes = 0;
  };
  absl::StatusOr<std::vector<RemovedJob>> RemoveEndedJobs(absl::Time ended_before,
                                                          int64_t keep_per_owner, int64_t batch);
  // Bytes of the stored specs (YAML and JSON) of each owner's jobs.
  absl::StatusOr<std::map<std::string, int64_t>> SpecBytesByOwner();

  // Events, ascending by sequence.
  absl::Status AppendEvent(const JobEventRecord& event);
  absl::StatusOr<std::vector<JobEventRecord>> ListEvents(absl::string_view job_id,
                                                         int64_t after_sequence, int limit);

  // Assignments, keyed by (job_id, attempt, rank).
  absl::Status InsertAssignment(const AssignmentRecord& assignment);
  absl::Status UpdateAssignment(const AssignmentRecord& assignment);
  absl::StatusOr<std::vector<AssignmentRecord>> ActiveAssignments();
  absl::StatusOr<std::vector<AssignmentRecord>> Assignments(absl::string_view job_id, int attempt);

  // Workers, keyed by id.
  absl::Status UpsertWorker(const WorkerRecord& worker);
  absl::StatusOr<std::vector<WorkerRecord>> ListWorkers();

  // A job's output: metrics and log lines per attempt and rank
  // (store_output.cc, server/job_output.h). AppendOutput stores the batches
  // in one transaction, skipping lines already stored (a retried batch) and
  // enforcing `caps` of each batch's kind; ReadOutput reads up to
  // query.limit lines (and about kOutputPageBytes) after query.after_cursor,
  // oldest first. Retention removes them with their job.
  absl::Status AppendOutput(const std::vector<OutputBatch>& batches, const OutputCaps& metrics_caps,
                            const OutputCaps& log_caps, absl::Time now);
  absl::StatusOr<OutputPage> ReadOutput(const OutputQuery& query);
  // By attempt, then rank; `attempt` 0: every attempt.
  absl::StatusOr<std::vector<OutputSummary>> OutputSummaries(absl::string_view job_id,
                                                             OutputKind kind, int attempt);

 private:
  Store(std::unique_ptr<sqlite::Database> db, int lock_fd)
      : db_(std::move(db)), lock_fd_(lock_fd) {}
  absl::Status Configure();
  absl::Status Migrate();
  // A cached prepared statement for `sql`, reset and ready to bind.
  absl::StatusOr<sqlite::Statement*> Prepared(absl::string_view sql, absl::string_view what);
  absl::StatusOr<std::vector<JobRecord>> QueryJobs(sqlite::Statement& stmt, bool with_spec);
  // store_output.cc: the stored state of one rank's lines, and shrinking
  // them back under the caps.
  absl::StatusOr<OutputSummary> LoadOutputSummary(const OutputBatch& batch);
  absl::Status SaveOutputSummary(const OutputBatch& batch, const OutputSummary& summary);
  absl::Status ShrinkOutput(const OutputBatch& batch, const OutputCaps& caps,
                            OutputSummary& summary);
  absl::Status CountOutput(const OutputBatch& batch, OutputSummary& summary);

  std::unique_ptr<sqlite::Database> db_;
  int lock_fd_ = -1;
  absl::flat_hash_map<std::string, std::unique_ptr<sqlite::Statement>> statements_;
};

}  // namespace sbp::server
