// Where a job submitted to a shared coordinator may read and write: one rule,
// applied at submit, in admission and in the worker.
//
// Every path of the spec (model, data, eval.data, the DPO/GRPO references,
// resume_from, checkpoint.dir) is resolved in its owner's area: the
// directory <work-dir>/<user>/ under a users file, the work directory itself
// for a single-user coordinator. A relative path must not climb with ".." and
// must resolve, symbolic links followed, inside the area. A path the job only
// reads may instead be absolute (or a link) that resolves inside the shared
// read-only directory an admin names (--shared-dir: base models, common data
// sets). checkpoint.dir and streambp.offload.disk_dir are written: relative,
// inside the area. So no job
// reads or writes another user's files, and checkpoint.dir means the same
// directory in the check and in the write.
//
// The worker checks again right before it opens anything (a link planted
// after the submit is refused) and then runs the job confined to the same
// roots on the opened descriptors (common/file_confinement.h). `sbp train`, a
// user's own local process, does not confine its paths.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/train/job_spec.h"

namespace sbp {

struct PathPolicy {
  std::string work_dir;    // "" : no confinement at all
  std::string shared_dir;  // read-only paths may resolve here too ("" : none)
  std::string run_area;    // the owner's area under work_dir ("alice/"; "" : the work dir)
  // false: relative paths still resolve in work_dir, but any path goes (the
  // embedded coordinator of `sbp run` serves one local user, whose paths are
  // their own, as for `sbp train`).
  bool confine = true;
};

// The directory a job's relative paths resolve in: work_dir/run_area ("" when
// the policy confines nothing).
std::string JobArea(const PathPolicy& policy);

// The roots a confined job may read (the area, then the shared directory).
std::vector<std::string> JobReadRoots(const PathPolicy& policy);

// InvalidArgument naming the field and the rule it breaks. The message names
// only the path as written, never what a link leads to, so a refusal tells
// nothing about files outside the area.
absl::Status CheckJobPaths(const JobSpec& spec, const PathPolicy& policy);

// Checks one file the job reads, given as a path the caller resolved in the
// area (admission's <model>/config.json): inside the area or the shared
// directory once links are followed, else InvalidArgument naming `field`.
absl::Status CheckJobReadPath(const std::string& field, const std::string& path,
                              const PathPolicy& policy);

}  // namespace sbp
