// <run>/checkpoints/latest names the run's newest checkpoint. It is a
// relative directory link (latest -> step-00000136), so that `latest` is
// itself a model directory for transformers, PEFT and every sbp command, and
// the run directory can move. It is replaced atomically: the new link is
// made under a temporary name (latest.tmp) and renamed over the old one.
// Runs written before hold a text file naming the step directory instead;
// readers accept both.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sbp {

inline constexpr char kLatestName[] = "latest";

// Points `checkpoints_dir`/latest at its entry `step_name`. The directory is
// checked against this thread's file confinement once opened.
absl::Status PointLatestAt(const std::string& checkpoints_dir, const std::string& step_name);

// The entry of `checkpoints_dir` that `latest` names (the link's target or
// the old text file's line). NotFound when there is no `latest`;
// InvalidArgument naming it when it names anything but a plain entry of
// that directory (a name without '/', not "." or "..").
absl::StatusOr<std::string> ReadLatestName(const std::string& checkpoints_dir);

}  // namespace sbp
