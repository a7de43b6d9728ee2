// The run directory of a job (checkpoint.dir) and who may write it.
//
//   <run>/run.json   {"job_id": "...", "spec_hash": "...", "attempt": K}
//
// A run belongs to one job: a new job never resumes another job's run (or
// a run of another spec) by accident; that is FailedPrecondition naming both,
// and `resume_from` says it on purpose. Retries of the same job resume it.
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

#include "absl/status/statusor.h"
#include "worker/train/job_spec.h"

namespace sbp {

struct RunIdentity {
  std::string job_id;     // "" for a local run (`sbp train`)
  std::string spec_hash;  // TrajectoryHash of the spec
  int64_t attempt = 0;    // the fencing token; 0 for a local run
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

class RunFence {
 public:
  // Creates `run_dir` or checks that it holds this job's run of this spec,
  // refuses a stale attempt, then records `identity.attempt` and removes
  // older attempts' checkpoint staging directories.
  static absl::StatusOr<RunFence> Claim(const std::string& run_dir, const RunIdentity& identity);

  // OK while no newer attempt has claimed the run.
  absl::Status Check() const;

  const std::string& run_dir() const { return run_dir_; }
  int64_t attempt() const { return identity_.attempt; }

 private:
  RunFence(std::string run_dir, RunIdentity identity)
      : run_dir_(std::move(run_dir)), identity_(std::move(identity)) {}
  std::string run_dir_;
  RunIdentity identity_;
};

// The checkpoint directory that `resume_from` names: itself when it is a
// checkpoint (has trainer_state.json), else the newest checkpoint of the
// run directory it names. InvalidArgument naming the field otherwise.
absl::StatusOr<std::string> ResolveResumeFrom(const std::string& path);

}  // namespace sbp
