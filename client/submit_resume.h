// `sbp submit --resume`: the run to continue, found through the coordinator
// (client/run_resume.h has the rule). Jobs are the caller's own: the
// coordinator lists and shows no one else's.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/coordinator_client.h"
#include "client/run_resume.h"
#include "worker/train/job_spec.h"

namespace sbp::cli {

// The run directory (in the caller's area) that `--resume` names: the newest
// job of the spec's name, the job given, or a run directory given as a path.
// FailedPrecondition while that job has not ended.
absl::StatusOr<std::string> ServiceRunToResume(CoordinatorClient& client, const JobSpec& spec,
                                               const ResumeFlag& flag);

// The caller's newest job named `name`, if any (for "not resuming ..." notes).
std::optional<streambp::v1::Job> NewestJobNamed(CoordinatorClient& client, const std::string& name);

}  // namespace sbp::cli
