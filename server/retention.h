// The retention policy's age flag: "30d", "12h", "90m", "3600s", or "0"
// (keep ended jobs for any age).
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sbp::server {

// InvalidArgument naming the text when it is not a non-negative whole number
// followed by s, m, h or d (or "0").
absl::StatusOr<absl::Duration> ParseRetentionAge(absl::string_view text);

}  // namespace sbp::server
