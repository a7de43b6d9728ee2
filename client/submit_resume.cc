#include "client/submit_resume.h"

#include "absl/strings/str_cat.h"
#include "client/job_output.h"

namespace sbp::cli {
namespace {

namespace v1 = streambp::v1;

// The run directory of a job that has ended.
absl::StatusOr<std::string> RunDirOfEndedJob(const v1::Job& job) {
  if (!IsTerminal(job.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--resume: job ", job.id(), " is ", StateName(job.state()),
        "; a job is continued once it has ended: `sbp cancel ", job.id(), "` stops it"));
  }
  return job.run_dir().empty() ? absl::StrCat("runs/", job.id()) : job.run_dir();
}

}  // namespace

std::optional<v1::Job> NewestJobNamed(CoordinatorClient& client, const std::string& name) {
  // The caller's own jobs (an admin's list holds everyone's), newest first;
  // the first page is enough for "the newest".
  absl::StatusOr<v1::WhoAmIResponse> me = client.WhoAmI();
  if (!me.ok()) return std::nullopt;
  const std::string owner = me->role() == "admin" ? me->name() : "";
  absl::StatusOr<v1::ListJobsResponse> jobs = client.List({}, 100, false, owner);
  if (!jobs.ok()) return std::nullopt;
  for (const v1::Job& job : jobs->jobs()) {
    if (job.name() != name) continue;
    absl::StatusOr<v1::Job> full = client.Get(job.id());  // with its spec: the run directory
    if (full.ok()) return *full;
  }
  return std::nullopt;
}

absl::StatusOr<std::string> ServiceRunToResume(CoordinatorClient& client, const JobSpec& spec,
                                               const ResumeFlag& flag) {
  if (flag.target.empty()) {
    if (!spec.checkpoint.dir.empty()) return spec.checkpoint.dir;
    std::optional<v1::Job> newest = NewestJobNamed(client, spec.name);
    if (!newest.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--resume: you have no job named ", spec.name,
          " to continue; leave --resume out to start one, or name the job or run directory"));
    }
    return RunDirOfEndedJob(*newest);
  }
  absl::StatusOr<v1::Job> job = client.Get(flag.target);
  if (job.ok()) return RunDirOfEndedJob(*job);
  if (job.status().code() != absl::StatusCode::kNotFound &&
      job.status().code() != absl::StatusCode::kInvalidArgument) {
    return job.status();
  }
  // Not a job of the caller's: a run directory in the caller's area (the
  // coordinator checks the path like every path of the spec).
  return flag.target;
}

}  // namespace sbp::cli
