// A run file that whole records are appended to (metrics.jsonl lines,
// TensorBoard records): opened with O_APPEND and O_NOFOLLOW and its
// descriptor checked against the job's confinement, and each record one
// write(2), which O_APPEND places at the end whole, so no record is torn or
// interleaved. Write errors name the file; failing storage (ENOSPC, EIO,
// EROFS) is marked FailureKind::kStorage.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sbp {

class AppendFile {
 public:
  enum class Mode { kExisting, kCreateNew };  // kCreateNew: O_CREAT | O_EXCL
  static absl::StatusOr<AppendFile> Open(const std::string& path, Mode mode);
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  ~AppendFile();

  absl::Status Append(absl::string_view record);
  const std::string& path() const { return path_; }

 private:
  AppendFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

// The error of a failed write to `path` (errno `error`).
absl::Status AppendWriteError(const std::string& path, int error);

}  // namespace sbp
