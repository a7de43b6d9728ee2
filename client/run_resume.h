// One resume rule for `sbp train`, `sbp run` and `sbp submit`: a job
// continues an earlier run only when asked, with `--resume [RUN_DIR|JOB_ID]`
// (or `resume_from` in the spec, which starts a new run from a checkpoint).
//
//   --resume            the newest run of the spec's job name (the user's own:
//                       under runs/ locally, the user's jobs on a coordinator);
//                       checkpoint.dir when the spec names one
//   --resume RUN_DIR    that run directory
//   --resume JOB_ID     that job's run directory (runs/<id> locally)
//
// A resumed job writes into the run it continues (checkpoint.dir and
// resume_from both name it), so metrics.jsonl and tb/ hold one curve.
// Without --resume a job never writes into an earlier run: the local
// commands pick a fresh directory and say which run they did not resume.
#pragma once

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "worker/train/job_spec.h"

namespace sbp::cli {

// `--resume` as given: absent, bare, or with a run directory or job id.
struct ResumeFlag {
  bool given = false;
  std::string target;  // "" : the newest run of the job's name
};

// Adds `--resume [RUN_DIR|JOB_ID]` to a command whose positional argument
// is the job spec, which must not be required by CLI11: TakeResumeFlag
// checks it (so that `--resume job.yaml` still reads job.yaml as the spec).
CLI::Option* AddResumeOption(CLI::App& command, ResumeFlag& flag);

// After parsing: records whether --resume was given and puts a spec file
// it swallowed back; InvalidArgument when no spec was given.
absl::Status TakeResumeFlag(const CLI::Option& option, ResumeFlag& flag, std::string& spec_path);

// The run directory a local `--resume` names, resolved against `base_dir`
// (the spec's relative paths resolve there too). InvalidArgument naming the
// flag when there is none.
absl::StatusOr<std::string> LocalRunToResume(const JobSpec& spec, const ResumeFlag& flag,
                                             const std::string& base_dir);

// The spec text with checkpoint.dir and resume_from set to `run_dir`, so
// that the job continues that run in place. Other fields are kept as
// written (comments are not).
absl::StatusOr<std::string> SpecContinuingRun(const std::string& spec_yaml,
                                              const std::string& run_dir);

// Whether `run_dir` holds a run (run.json or checkpoints).
bool HoldsRun(const std::string& run_dir);

// "runs/x (last checkpoint step-00000040)" or "runs/x (no checkpoint)".
std::string DescribeRun(const std::string& run_dir);

// The newest run of `name` under <base_dir>/runs, if any.
std::optional<std::string> NewestLocalRun(const std::string& base_dir, const std::string& name);

// `sbp train` without --resume: the run directory for a new run. The spec's
// default (runs/<name>) when it holds no run yet, else the first free
// runs/<name>-N; a checkpoint.dir the spec names that already holds a run is
// refused, naming --resume. `*not_resumed` gets the run it did not resume.
absl::StatusOr<std::string> LocalRunForNewJob(const JobSpec& spec, const std::string& base_dir,
                                              std::string* not_resumed);

}  // namespace sbp::cli
