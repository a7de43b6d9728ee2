// What a command means by a checkpoint argument (sbp generate --model and
// --adapter, sbp lora merge, sbp export, sbp grad --model, resume_from):
//   - a model or adapter directory (config.json or adapter_config.json):
//     itself;
//   - <run>/checkpoints/latest, a link or (older runs) a text file: the
//     step directory it names;
//   - a run directory (it holds checkpoints/ or run.json), or its
//     checkpoints/ folder: the run's newest checkpoint;
//   - anything else: itself, for the loader to report what is missing.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace sbp {

// `field` names the argument in errors ("--adapter"). FailedPrecondition
// for a run directory with no checkpoint yet; the error of a `latest` that
// names nothing usable otherwise.
absl::StatusOr<std::string> ResolveCheckpointArgument(const std::string& field,
                                                      const std::string& path);

}  // namespace sbp
