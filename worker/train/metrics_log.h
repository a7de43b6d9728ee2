// <run>/metrics.jsonl: one JSON line per optimizer step, appended by the
// attempt that owns the run. Opening keeps the lines up to the step the run
// resumes from (a resumed run rewrites what came after its checkpoint); the
// kept lines are written to a new file that replaces the old one, so an older
// attempt that still holds the old file open can no longer change what
// readers see, and every line is one append-mode write (AppendFile), so no
// line is torn or padded with NULs.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/train/tracking/append_file.h"

namespace sbp {

class MetricsLog {
 public:
  static absl::StatusOr<MetricsLog> Open(const std::string& path, int64_t keep_through_step);

  // Appends `line` and a newline.
  absl::Status Append(absl::string_view line);

 private:
  explicit MetricsLog(AppendFile file) : file_(std::move(file)) {}
  AppendFile file_;
};

}  // namespace sbp
