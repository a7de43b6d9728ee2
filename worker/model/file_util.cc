#include "worker/model/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/failure_kind.h"
#include "common/file_confinement.h"
#include "common/input_limits.h"
#include "common/status_macros.h"

namespace sbp {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path, int error) {
  const std::string message = absl::StrCat(path, ": ", what, " failed: ", std::strerror(error));
  if (error == ENOENT) return absl::NotFoundError(message);
  if (error == EACCES || error == EPERM) return absl::PermissionDeniedError(message);
  // Failing storage is not the job's fault: the attempt is retried once the
  // disk has room again (not an out-of-memory ResourceExhausted).
  return FileOperationError(message, error);
}

std::string ParentDirectory(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path, int64_t max_bytes) {
  return ReadRegularFile(path, max_bytes, "a file read whole");
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(RegularFile file, RegularFile::Open(path, std::numeric_limits<int64_t>::max(),
                                                       "a memory-mapped file"));
  const size_t size = static_cast<size_t>(file.size());
  void* data = nullptr;
  if (size > 0) {
    data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (data == MAP_FAILED) return ErrnoError("mmap", path, errno);
  }
  // The mapping keeps the file alive once `file` closes it.
  return std::unique_ptr<MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(
    const std::string& path) {
  // Everything happens relative to the parent directory's descriptor, checked
  // once opened: a symbolic link swapped in for a directory later changes
  // nothing, and one planted as the file itself is refused (O_NOFOLLOW).
  const std::string parent = ParentDirectory(path);
  const int dir_fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoError("open directory", parent, errno);
  if (absl::Status confined = CheckOpenedDescriptor(dir_fd, parent, FileAccess::kWrite);
      !confined.ok()) {
    ::close(dir_fd);
    return confined;
  }
  std::string name = std::filesystem::path(path).filename().string();
  std::string temp_name = name + ".tmp";
  const int fd = ::openat(dir_fd, temp_name.c_str(),
                          O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    const int error = errno;
    ::close(dir_fd);
    return ErrnoError("create", path + ".tmp", error);
  }
  return std::unique_ptr<AtomicFileWriter>(
      new AtomicFileWriter(path, std::move(name), std::move(temp_name), dir_fd, fd));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlinkat(dir_fd_, temp_name_.c_str(), 0);
  ::close(dir_fd_);
}

absl::Status AtomicFileWriter::Append(absl::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  const char* data = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write", path_ + ".tmp", errno);
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  written_ += static_cast<int64_t>(bytes.size());
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  const std::string temp_path = path_ + ".tmp";
  if (::fsync(fd_) != 0) return ErrnoError("fsync", temp_path, errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return ErrnoError("close", temp_path, errno);
  if (::renameat(dir_fd_, temp_name_.c_str(), dir_fd_, name_.c_str()) != 0) {
    return ErrnoError("rename to " + path_, temp_path, errno);
  }
  committed_ = true;
  if (::fsync(dir_fd_) != 0 && errno != EINVAL) {
    return ErrnoError("fsync directory", ParentDirectory(path_), errno);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> writer, AtomicFileWriter::Create(path));
  RETURN_IF_ERROR(writer->Append(contents));
  return writer->Commit();
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open directory", dir, errno);
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0 && error != EINVAL) return ErrnoError("fsync directory", dir, error);
  return absl::OkStatus();
}

}  // namespace sbp
