// Where a job submitted to a shared coordinator may read and write. Every
// path of the spec (model, data, the references, resume_from,
// checkpoint.dir) must be relative, must not climb with "..", and must
// resolve — symlinks followed — inside the work directory; the paths a job
// only reads may also resolve inside a shared read-only directory; and the
// run directory must lie in the owner's area of the work directory
// (<work-dir>/<user>/ under a users file). The coordinator checks at submit,
// and the worker again right before it opens anything, so that a symlink
// planted after the submit is refused too. `sbp train`, a user's own local
// process, does not confine its paths.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "worker/train/job_spec.h"

namespace sbp {

struct PathPolicy {
  std::string work_dir;    // "" : no confinement at all
  std::string shared_dir;  // read-only paths may resolve here too ("" : none)
  std::string run_area;    // checkpoint.dir lies under work_dir/run_area ("" : anywhere)
};

// InvalidArgument naming the field and the rule it breaks.
absl::Status CheckJobPaths(const JobSpec& spec, const PathPolicy& policy);

}  // namespace sbp
