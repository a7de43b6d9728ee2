// Confines the files a job touches to its directories, checked on what was
// actually opened rather than on a path checked earlier, so that a symbolic
// link planted after the check cannot lead a job outside.
//
// A confinement is installed for the current thread (the thread that runs
// the job; the worker's own threads are not confined) with
// ScopedFileConfinement. While one is installed:
//  - every file read through RegularFile / ReadFileToString / MappedFile is
//    checked after open(): the descriptor's real location (from
//    /proc/self/fd) must lie inside a read root or a write root;
//  - files are created (AtomicFileWriter, append logs) with openat() in a
//    parent directory whose descriptor lies inside a write root, and the last
//    component is opened with O_NOFOLLOW;
//  - directory operations (create, remove, rename) are checked with
//    CheckConfinedPath right before they run: the nearest existing ancestor,
//    symlinks resolved, must lie inside a write root.
// Refusals are InvalidArgument naming the path and where it really leads.
// Without a confinement every check passes.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sbp {

struct FileConfinement {
  std::vector<std::string> read_roots;   // readable only
  std::vector<std::string> write_roots;  // readable and writable
};

enum class FileAccess { kRead, kWrite };

// Installs `confinement` (roots resolved with realpath; a root that does not
// exist yet is kept as written) on this thread until destroyed; the previous
// one, if any, comes back then.
class ScopedFileConfinement {
 public:
  explicit ScopedFileConfinement(FileConfinement confinement);
  ~ScopedFileConfinement();
  ScopedFileConfinement(const ScopedFileConfinement&) = delete;
  ScopedFileConfinement& operator=(const ScopedFileConfinement&) = delete;

 private:
  FileConfinement confinement_;
  const FileConfinement* previous_;
};

// True when this thread runs under a confinement.
bool FileConfinementActive();

// Checks the open descriptor `fd` (opened from `path`) against this thread's
// confinement.
absl::Status CheckOpenedDescriptor(int fd, absl::string_view path, FileAccess access);

// Checks `path` before a directory operation: its nearest existing ancestor,
// symlinks resolved, must lie inside a root allowing `access`.
absl::Status CheckConfinedPath(const std::string& path, FileAccess access);

}  // namespace sbp
