#include "worker/train/latest_link.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/failure_kind.h"
#include "common/file_confinement.h"
#include "common/status_macros.h"
#include "worker/model/file_util.h"

namespace sbp {
namespace {

constexpr char kTempName[] = "latest.tmp";

absl::Status Failed(absl::string_view what, const std::string& path, int error) {
  return FileOperationError(absl::StrCat(path, ": ", what, " failed: ", std::strerror(error)),
                            error);
}

// A filesystem that holds no symbolic links (some network and FUSE mounts).
bool NoLinksHere(int error) { return error == EPERM || error == EOPNOTSUPP || error == ENOSYS; }

// Every call below works on the directory's descriptor, checked once opened.
absl::Status ReplaceLink(int dir_fd, const std::string& dir, const std::string& target) {
  const std::string temp = absl::StrCat(dir, "/", kTempName);
  const std::string latest = absl::StrCat(dir, "/", kLatestName);
  if (::unlinkat(dir_fd, kTempName, 0) != 0 && errno != ENOENT) {
    return Failed("remove", temp, errno);
  }
  if (::symlinkat(target.c_str(), dir_fd, kTempName) != 0) {
    // There `latest` stays what older runs wrote: a text file with the name.
    if (NoLinksHere(errno)) return WriteFileAtomically(latest, target + "\n");
    return Failed("symlink", temp, errno);
  }
  if (::renameat(dir_fd, kTempName, dir_fd, kLatestName) != 0) {
    const int error = errno;
    ::unlinkat(dir_fd, kTempName, 0);
    if (error == EISDIR || error == ENOTEMPTY || error == EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat(latest,
                       " is a directory, not the link to the newest checkpoint (a copy "
                       "that followed the link?): remove it"));
    }
    return Failed(absl::StrCat("rename to ", kLatestName), temp, error);
  }
  if (::fsync(dir_fd) != 0 && errno != EINVAL) return Failed("fsync directory", dir, errno);
  return absl::OkStatus();
}

bool IsPlainName(absl::string_view name) {
  return !name.empty() && name != "." && name != ".." && !absl::StrContains(name, '/');
}

}  // namespace

absl::Status PointLatestAt(const std::string& checkpoints_dir, const std::string& step_name) {
  if (!IsPlainName(step_name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(checkpoints_dir, ": '", step_name, "' is not an entry name for latest"));
  }
  const int dir_fd = ::open(checkpoints_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Failed("open directory", checkpoints_dir, errno);
  absl::Status status = CheckOpenedDescriptor(dir_fd, checkpoints_dir, FileAccess::kWrite);
  if (status.ok()) status = ReplaceLink(dir_fd, checkpoints_dir, step_name);
  ::close(dir_fd);
  return status;
}

absl::StatusOr<std::string> ReadLatestName(const std::string& checkpoints_dir) {
  const std::string path = absl::StrCat(checkpoints_dir, "/", kLatestName);
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return Failed("stat", path, errno);
  }
  std::string name;
  if (S_ISLNK(info.st_mode)) {
    char target[PATH_MAX];
    const ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
    if (n < 0) return Failed("readlink", path, errno);
    name.assign(target, static_cast<size_t>(n));
  } else {
    // A run written before `latest` was a link: a text file with the name.
    ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path, 4096));
    name = std::string(absl::StripAsciiWhitespace(text));
  }
  if (!IsPlainName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " names '", name, "', not a checkpoint directory beside it (expected step-N)"));
  }
  return name;
}

}  // namespace sbp
