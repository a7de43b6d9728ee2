// Small file helpers for model I/O: whole-file reads, read-only memory maps and
// crash-safe writes (write `path.tmp`, fsync, rename over `path`, fsync the
// directory), so a reader never sees a half-written file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sbp {

// Files read whole are capped at this size unless the caller gives its own
// limit (config.json, job specs and indexes have smaller ones).
inline constexpr int64_t kDefaultMaxReadBytes = int64_t{64} << 20;

// Whole file contents of a regular file (after symlinks) of at most
// `max_bytes`. NotFound when it does not exist; InvalidArgument for a FIFO, a
// device, a directory or a larger file, decided before anything is read.
absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             int64_t max_bytes = kDefaultMaxReadBytes);

// Read-only view of a whole regular file (mmap; an empty file maps to no
// bytes). Anything else is InvalidArgument, without blocking on a FIFO.
class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::string_view bytes() const {
    return absl::string_view(static_cast<const char*>(data_), size_);
  }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, void* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  void* data_;
  size_t size_;
};

// Writes `path` atomically: Append() goes to `path.tmp`; Commit() fsyncs it,
// renames it over `path` and fsyncs the directory. Destroying an uncommitted
// writer removes the temporary file. The directory is opened once, at
// Create, and checked against the thread's file confinement
// (common/file_confinement.h); the file is created in it with O_NOFOLLOW.
class AtomicFileWriter {
 public:
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Create(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  absl::Status Append(absl::string_view bytes);
  absl::Status Commit();
  int64_t bytes_written() const { return written_; }

 private:
  AtomicFileWriter(std::string path, std::string name, std::string temp_name, int dir_fd, int fd)
      : path_(std::move(path)),
        name_(std::move(name)),
        temp_name_(std::move(temp_name)),
        dir_fd_(dir_fd),
        fd_(fd) {}
  std::string path_;
  std::string name_;       // last component of path_
  std::string temp_name_;  // name_ + ".tmp", in the same directory
  int dir_fd_;             // the directory, opened (and checked) at Create
  int fd_;
  int64_t written_ = 0;
  bool committed_ = false;
};

// AtomicFileWriter for a string.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// fsync of a directory (makes renames inside it durable).
absl::Status SyncDirectory(const std::string& dir);

}  // namespace sbp
