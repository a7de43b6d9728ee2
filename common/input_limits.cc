#include "common/input_limits.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_confinement.h"

namespace sbp {
namespace {

absl::Status ErrnoError(const std::string& path, int error) {
  const std::string message = absl::StrCat(path, ": cannot open (", std::strerror(error), ")");
  if (error == ENOENT || error == ENOTDIR) return absl::NotFoundError(message);
  if (error == EACCES || error == EPERM) return absl::PermissionDeniedError(message);
  if (error == ELOOP || error == ENAMETOOLONG) return absl::InvalidArgumentError(message);
  return absl::InternalError(message);
}

absl::Status CheckStat(const std::string& path, const struct stat& st, int64_t max_bytes,
                       absl::string_view what) {
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is ", FileTypeName(st.st_mode),
                                                   ", not a regular file (only regular files are "
                                                   "read)"));
  }
  if (st.st_size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": has ", st.st_size, " bytes, over the ",
                                                   LimitText(max_bytes), " limit for ", what));
  }
  return absl::OkStatus();
}

// Whether a YAML quote or flow indicator at `i` starts a token: at the start of
// a line, after whitespace or an indicator ('[', '{' and ',' are indicators
// only inside a flow collection).
bool AtTokenStart(absl::string_view text, size_t i, bool in_flow) {
  if (i == 0) return true;
  switch (text[i - 1]) {
    case ' ':
    case '\t':
    case '\n':
    case '\r':
    case ':':
    case '-':
    case '?':
      return true;
    case '[':
    case '{':
    case ',':
      return in_flow;
    default:
      return false;
  }
}

std::string Prefix(absl::string_view source) {
  return source.empty() ? std::string() : absl::StrCat(source, ": ");
}

}  // namespace

absl::string_view FileTypeName(uint32_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a file";
}

std::string LimitText(int64_t bytes) {
  static constexpr std::pair<int64_t, const char*> kUnits[] = {{int64_t{1} << 40, "TiB"},
                                                               {int64_t{1} << 30, "GiB"},
                                                               {int64_t{1} << 20, "MiB"},
                                                               {int64_t{1} << 10, "KiB"}};
  for (const auto& [unit, suffix] : kUnits) {
    if (bytes >= unit && bytes % unit == 0) return absl::StrCat(bytes / unit, " ", suffix);
  }
  return absl::StrCat(bytes, " bytes");
}

absl::StatusOr<RegularFile> RegularFile::Open(const std::string& path, int64_t max_bytes,
                                              absl::string_view what) {
  // The type first, from the path: opening a FIFO would block until a writer
  // comes, and opening some devices has side effects.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoError(path, errno);
  if (absl::Status status = CheckStat(path, st, max_bytes, what); !status.ok()) return status;
  // O_NONBLOCK: the path may have been replaced by a FIFO since stat().
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError(path, errno);
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return ErrnoError(path, error);
  }
  if (absl::Status status = CheckStat(path, st, max_bytes, what); !status.ok()) {
    ::close(fd);
    return status;
  }
  // Under a job's confinement, what was opened must lie inside its directories.
  if (absl::Status status = CheckOpenedDescriptor(fd, path, FileAccess::kRead); !status.ok()) {
    ::close(fd);
    return status;
  }
  return RegularFile(path, fd, static_cast<int64_t>(st.st_size), max_bytes, std::string(what));
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      max_bytes_(other.max_bytes_),
      what_(std::move(other.what_)) {}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    max_bytes_ = other.max_bytes_;
    what_ = std::move(other.what_);
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<size_t> RegularFile::Read(char* buffer, size_t n) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": file is not open"));
  while (true) {
    const ssize_t got = ::read(fd_, buffer, n);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno == EINTR) continue;
    return absl::DataLossError(absl::StrCat(path_, ": read error (", std::strerror(errno), ")"));
  }
}

absl::StatusOr<std::string> RegularFile::ReadAll() {
  std::string out;
  out.resize(static_cast<size_t>(std::min(size_, max_bytes_)) + 1);
  size_t used = 0;
  while (true) {
    if (used == out.size()) {
      if (static_cast<int64_t>(used) > max_bytes_) {
        return absl::InvalidArgumentError(absl::StrCat(path_, ": grew past the ",
                                                       LimitText(max_bytes_), " limit for ", what_,
                                                       " while it was read"));
      }
      out.resize(std::min<size_t>(out.size() * 2, static_cast<size_t>(max_bytes_) + 1));
    }
    absl::StatusOr<size_t> got = Read(out.data() + used, out.size() - used);
    if (!got.ok()) return got.status();
    if (*got == 0) break;
    used += *got;
  }
  if (static_cast<int64_t>(used) > max_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": grew past the ", LimitText(max_bytes_),
                                                   " limit for ", what_, " while it was read"));
  }
  out.resize(used);
  return out;
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes,
                                            absl::string_view what) {
  absl::StatusOr<RegularFile> file = RegularFile::Open(path, max_bytes, what);
  if (!file.ok()) return file.status();
  return file->ReadAll();
}

absl::Status CheckJsonNesting(absl::string_view text, int max_depth, absl::string_view source) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return absl::InvalidArgumentError(absl::StrCat(Prefix(source), "JSON nested deeper than ",
                                                       max_depth, " levels (at byte ", i, ")"));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckYamlNesting(absl::string_view text, int max_depth, absl::string_view source) {
  enum class State { kPlain, kSingle, kDouble, kComment };
  State state = State::kPlain;
  int depth = 0;
  int64_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      if (state == State::kComment) state = State::kPlain;
      continue;
    }
    switch (state) {
      case State::kComment:
        continue;
      case State::kDouble:
        if (c == '\\') {
          if (i + 1 < text.size() && text[i + 1] != '\n') ++i;
        } else if (c == '"') {
          state = State::kPlain;
        }
        continue;
      case State::kSingle:
        if (c == '\'') {
          if (i + 1 < text.size() && text[i + 1] == '\'') {
            ++i;  // '' is a quote inside the scalar
          } else {
            state = State::kPlain;
          }
        }
        continue;
      case State::kPlain:
        break;
    }
    if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n')) {
      state = State::kComment;
    } else if ((c == '"' || c == '\'') && AtTokenStart(text, i, depth > 0)) {
      state = c == '"' ? State::kDouble : State::kSingle;
    } else if ((c == '[' || c == '{') && (depth > 0 || AtTokenStart(text, i, false))) {
      if (++depth > max_depth) {
        return absl::InvalidArgumentError(absl::StrCat(
            Prefix(source), "line ", line, ": YAML nested deeper than ", max_depth, " levels"));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return absl::OkStatus();
}

}  // namespace sbp
