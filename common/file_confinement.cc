#include "common/file_confinement.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sbp {
namespace {

thread_local const FileConfinement* current_confinement = nullptr;

// `path` made absolute and normal, with its nearest existing ancestor
// resolved (symlinks followed) and the components below it, which do not
// exist yet, appended as written.
std::string ResolveExistingPrefix(const std::string& path) {
  std::error_code ec;
  std::filesystem::path candidate = std::filesystem::absolute(path, ec).lexically_normal();
  if (ec) return path;
  std::filesystem::path missing;
  char real[PATH_MAX];
  while (::realpath(candidate.c_str(), real) == nullptr) {
    if (!candidate.has_relative_path()) {
      std::strcpy(real, "/");
      break;
    }
    missing = candidate.filename() / missing;
    candidate = candidate.parent_path();
  }
  std::string resolved = (std::filesystem::path(real) / missing).lexically_normal().string();
  while (resolved.size() > 1 && resolved.back() == '/') resolved.pop_back();
  return resolved;
}

bool Inside(absl::string_view real, absl::string_view root) {
  if (root == "/") return absl::StartsWith(real, "/");
  return real == root ||
         (absl::StartsWith(real, root) && real.size() > root.size() && real[root.size()] == '/');
}

bool Allowed(const FileConfinement& confinement, absl::string_view real, FileAccess access) {
  for (const std::string& root : confinement.write_roots) {
    if (Inside(real, root)) return true;
  }
  if (access == FileAccess::kWrite) return false;
  for (const std::string& root : confinement.read_roots) {
    if (Inside(real, root)) return true;
  }
  return false;
}

absl::Status Refusal(const FileConfinement& confinement, absl::string_view path,
                     absl::string_view real, FileAccess access) {
  std::vector<std::string> named = confinement.write_roots;
  if (access == FileAccess::kRead) {
    named.insert(named.end(), confinement.read_roots.begin(), confinement.read_roots.end());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": leads to '", real, "', outside the directories this job may ",
      access == FileAccess::kWrite ? "write" : "read", " (", absl::StrJoin(named, ", "),
      "); a symbolic link inside the work directory points out of it"));
}

}  // namespace

ScopedFileConfinement::ScopedFileConfinement(FileConfinement confinement)
    : confinement_(std::move(confinement)), previous_(current_confinement) {
  for (std::string& root : confinement_.read_roots) root = ResolveExistingPrefix(root);
  for (std::string& root : confinement_.write_roots) root = ResolveExistingPrefix(root);
  current_confinement = &confinement_;
}

ScopedFileConfinement::~ScopedFileConfinement() { current_confinement = previous_; }

bool FileConfinementActive() { return current_confinement != nullptr; }

absl::Status CheckOpenedDescriptor(int fd, absl::string_view path, FileAccess access) {
  const FileConfinement* confinement = current_confinement;
  if (confinement == nullptr) return absl::OkStatus();
  // The kernel's name for what the descriptor refers to: every symlink on
  // the way already followed, whatever happened to the path since.
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  char real[PATH_MAX];
  const ssize_t n = ::readlink(link.c_str(), real, sizeof(real) - 1);
  if (n < 0) {
    return absl::InternalError(absl::StrCat(path, ": cannot tell where it leads (", link, ": ",
                                            std::strerror(errno),
                                            "); /proc must be mounted for confined jobs"));
  }
  real[n] = '\0';
  if (Allowed(*confinement, real, access)) return absl::OkStatus();
  return Refusal(*confinement, path, real, access);
}

absl::Status CheckConfinedPath(const std::string& path, FileAccess access) {
  const FileConfinement* confinement = current_confinement;
  if (confinement == nullptr) return absl::OkStatus();
  // What does not exist yet is created through the nearest ancestor that does.
  const std::string real = ResolveExistingPrefix(path);
  if (Allowed(*confinement, real, access)) return absl::OkStatus();
  return Refusal(*confinement, path, real, access);
}

}  // namespace sbp
