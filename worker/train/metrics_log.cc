#include "worker/train/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/failure_kind.h"
#include "common/file_confinement.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/model/file_util.h"

namespace sbp {
namespace {

absl::Status WriteError(const std::string& path, int error) {
  return FileOperationError(absl::StrCat(path, ": write failed: ", std::strerror(error)), error);
}

}  // namespace

absl::StatusOr<MetricsLog> MetricsLog::Open(const std::string& path, int64_t keep_through_step) {
  RETURN_IF_ERROR(CheckConfinedPath(path, FileAccess::kWrite));
  std::string kept;
  {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.value("step", int64_t{0}) <= keep_through_step) {
        absl::StrAppend(&kept, line, "\n");
      }
    }
  }
  RETURN_IF_ERROR(WriteFileAtomically(path, kept));
  // The file was just written in place; a link swapped in since is refused.
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return WriteError(path, errno);
  if (absl::Status confined = CheckOpenedDescriptor(fd, path, FileAccess::kWrite); !confined.ok()) {
    ::close(fd);
    return confined;
  }
  return MetricsLog(path, fd);
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status MetricsLog::Append(absl::string_view line) {
  const std::string text = absl::StrCat(line, "\n");
  // One write: O_APPEND places it at the end whole (regular files do not
  // return short writes except on errors such as ENOSPC).
  const ssize_t n = ::write(fd_, text.data(), text.size());
  if (n < 0) return WriteError(path_, errno);
  if (static_cast<size_t>(n) != text.size()) return WriteError(path_, ENOSPC);
  return absl::OkStatus();
}

}  // namespace sbp
