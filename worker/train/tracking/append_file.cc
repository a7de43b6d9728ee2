#include "worker/train/tracking/append_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/failure_kind.h"
#include "common/file_confinement.h"

namespace sbp {

absl::Status AppendWriteError(const std::string& path, int error) {
  return FileOperationError(absl::StrCat(path, ": write failed: ", std::strerror(error)), error);
}

absl::StatusOr<AppendFile> AppendFile::Open(const std::string& path, Mode mode) {
  const int flags = O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW |
                    (mode == Mode::kCreateNew ? O_CREAT | O_EXCL : 0);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return AppendWriteError(path, errno);
  AppendFile file(path, fd);
  if (absl::Status confined = CheckOpenedDescriptor(fd, path, FileAccess::kWrite); !confined.ok()) {
    return confined;
  }
  return file;
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status AppendFile::Append(absl::string_view record) {
  // Regular files do not return short writes except on errors such as ENOSPC.
  const ssize_t n = ::write(fd_, record.data(), record.size());
  if (n < 0) return AppendWriteError(path_, errno);
  if (static_cast<size_t>(n) != record.size()) return AppendWriteError(path_, ENOSPC);
  return absl::OkStatus();
}

}  // namespace sbp
