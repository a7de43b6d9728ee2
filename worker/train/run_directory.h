// The run directory of a job (checkpoint.dir) and who may write it.
//
//   <run>/run.json   {"job_id": "...", "name": "...", "spec_hash": "...",
//                     "attempt": K, "claimed_at": "RFC 3339",
//                     "stopped": {"how": ..., "step": N, "checkpoint": ...}}
//
// A run belongs to one job: a new job never resumes another job's run (or
// a run of another spec) by accident; that is FailedPrecondition naming both
// and the flag that continues it (`--resume`). Retries of the same job resume
// it. A job continues another's run in place only when asked (`--resume`,
// which sets both checkpoint.dir and resume_from to the run): it then takes
// the run over, and the older job's attempts are stale from then on.
//
// Fencing. Every attempt of a job carries its attempt number as a fencing
// token. Claiming the run records the token; an attempt whose token is
// older than the recorded one is stale and may not write: before each
// metrics line and each checkpoint commit it checks the fence, and a stale
// attempt stops with a stale-attempt error instead (FailureKind). The check
// and the write are not one atomic operation on a shared filesystem; the
// worker's local lease (worker_agent.h) closes that window by stopping an
// attempt before the coordinator can hand it to anyone else.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/train/job_spec.h"

namespace sbp {

struct RunIdentity {
  std::string job_id;     // "" for a local run (`sbp train`)
  std::string spec_hash;  // TrajectoryHash of the spec
  int64_t attempt = 0;    // the fencing token; 0 for a local run
  std::string name;       // the job's name (finds a job's newest run)
};

// What run.json says about a run (`--resume` looks runs up by name and age).
struct RunRecord {
  RunIdentity identity;
  std::string claimed_at;  // RFC 3339, the latest attempt's claim ("" in old runs)
};

// Where a run stopped, recorded in run.json when it ends (`sbp train`).
struct RunStop {
  std::string how;  // finished, interrupted, failed, ...
  int64_t step = 0;
  std::string checkpoint;  // "" before the first one
};

// A hash (hex) of the spec fields that decide a run's trajectory: model,
// data, objective, lengths, backward mode, every train field but `steps`,
// DPO/GRPO settings and the world size. Extending `steps`, renaming the job
// or changing checkpoint, priority or restart settings keeps the hash.
std::string TrajectoryHash(const JobSpec& spec);

// checkpoint.dir, or runs/<job id> (runs/<name> without an id), resolved
// against `base_dir`.
std::string RunDirectoryFor(const JobSpec& spec, const std::string& job_id,
                            const std::string& base_dir);

// True when the spec continues the run in `run_dir` in place: its
// resume_from names that same directory (what `--resume` writes).
bool ContinuesRun(const JobSpec& spec, const std::string& run_dir, const std::string& base_dir);

// run.json of `run_dir`; NotFound when the directory holds none.
absl::StatusOr<RunRecord> ReadRunRecord(const std::string& run_dir);

// Records in run.json where the run stopped (keeps the identity).
absl::Status RecordRunStop(const std::string& run_dir, const RunStop& stop);

// The directories under `runs_root` whose run.json names job `name` (or,
// for runs recorded before names were, whose directory is called so),
// newest claim first.
std::vector<std::string> FindRunsOfJob(const std::string& runs_root, const std::string& name);

class RunFence {
 public:
  // Creates `run_dir` or checks that it holds this job's run of this spec
  // (any run when `continue_run`: the job takes it over), refuses a stale
  // attempt, then records `identity` and removes older attempts' checkpoint
  // staging directories.
  static absl::StatusOr<RunFence> Claim(const std::string& run_dir, const RunIdentity& identity,
                                        bool continue_run);

  // OK while no newer attempt (nor another job) has claimed the run.
  absl::Status Check() const;

  const std::string& run_dir() const { return run_dir_; }
  int64_t attempt() const { return identity_.attempt; }

 private:
  RunFence(std::string run_dir, RunIdentity identity)
      : run_dir_(std::move(run_dir)), identity_(std::move(identity)) {}
  std::string run_dir_;
  RunIdentity identity_;
};

// The checkpoint directory that `resume_from` names, as
// ResolveCheckpointArgument resolves it (a checkpoint, the step a `latest`
// names, the newest checkpoint of a run directory), when it is a complete
// checkpoint (IsCompleteCheckpoint). InvalidArgument naming the field
// otherwise.
absl::StatusOr<std::string> ResolveResumeFrom(const std::string& path);

}  // namespace sbp
