// `--set key=value` on train, run and submit: changes one field of the job
// spec file before it is read, e.g. `--set train.lr=2e-4 --set
// resources.device=cuda`. The key is a dotted path of mapping keys; the
// value is read as YAML (a number, true/false, a string, [a, b], {k: v}).
// The result is parsed like the file, so a wrong key or value is refused
// with the spec parser's own error, which names the key.
#pragma once

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"

namespace sbp::cli {

// Adds the repeatable `--set KEY=VALUE` option.
void AddSetOption(CLI::App& command, std::vector<std::string>& overrides);

// `spec_yaml` with every override applied in order (the text itself when
// there are none). InvalidArgument naming the override for a malformed one
// or a key below something that is not a mapping.
absl::StatusOr<std::string> ApplySpecOverrides(const std::string& spec_yaml,
                                               const std::vector<std::string>& overrides);

// The spec file's text with the overrides applied.
absl::StatusOr<std::string> ReadJobSpecWithOverrides(const std::string& path,
                                                     const std::vector<std::string>& overrides);

// The source name errors give: "job.yaml", or "job.yaml with --set".
std::string SpecSourceName(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace sbp::cli
