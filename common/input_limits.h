// Guards for input that comes from files and the network, applied before any
// parser sees it, so that no input can crash or exhaust a process:
//  - files are read only when they are regular files (after symlinks) no
//    larger than a cap, decided from stat() before a byte is read: a FIFO never
//    blocks the reader, /dev/zero never fills memory, a sparse 20 GB file is
//    refused by its size;
//  - JSON and YAML text is pre-scanned for its nesting depth, because parsing
//    and printing nested values recurses: a line nested 200,000 brackets deep
//    would otherwise overflow the stack.
// Every refusal is InvalidArgument and names the path (or source) and the rule;
// a missing file is NotFound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sbp {

// Deepest nesting of arrays/objects (JSON) or flow collections (YAML) that the
// runtime's formats accept. Every format it reads needs at most 4 levels.
inline constexpr int kMaxInputNestingDepth = 64;

// A regular file open for reading (read-only, close-on-exec). Open() checks
// the type and the size before anything is read.
class RegularFile {
 public:
  // `max_bytes` caps the size; `what` names the kind of file in the size
  // error ("config.json", "job spec"). NotFound when `path` does not exist.
  static absl::StatusOr<RegularFile> Open(const std::string& path, int64_t max_bytes,
                                          absl::string_view what);
  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }  // at Open()
  int64_t max_bytes() const { return max_bytes_; }
  int fd() const { return fd_; }  // still owned by this object

  // Up to `n` bytes at the current position; 0 at the end of the file.
  absl::StatusOr<size_t> Read(char* buffer, size_t n);
  // The rest of the file; an error if it has grown past max_bytes since Open().
  absl::StatusOr<std::string> ReadAll();

 private:
  RegularFile(std::string path, int fd, int64_t size, int64_t max_bytes, std::string what)
      : path_(std::move(path)),
        fd_(fd),
        size_(size),
        max_bytes_(max_bytes),
        what_(std::move(what)) {}
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
  int64_t max_bytes_ = 0;
  std::string what_;
};

// The whole of a regular file of at most `max_bytes` (see RegularFile::Open).
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes,
                                            absl::string_view what);

// "a FIFO", "a directory", "a character device", ... for messages; "" for a
// regular file. `mode` is a stat st_mode.
absl::string_view FileTypeName(uint32_t mode);

// "1 MiB", "64 KiB", "512 bytes": a limit as written in messages.
std::string LimitText(int64_t bytes);

// InvalidArgument "<source>: ... nested deeper than <max_depth> levels ..."
// when JSON `text` opens more than `max_depth` arrays/objects at once. Strings
// are skipped (escapes included); the text need not be valid JSON.
absl::Status CheckJsonNesting(absl::string_view text, int max_depth, absl::string_view source);

// The same for YAML flow collections ([...] and {...}) outside quoted scalars
// and comments; the message gives the line. Block nesting is bounded by the
// YAML parser itself (yaml-cpp refuses more than 2000 levels).
absl::Status CheckYamlNesting(absl::string_view text, int max_depth, absl::string_view source);

// Every byte in 0x20-0x7e: text that another party shows on a terminal
// (worker names and versions) carries no control character.
inline bool IsPrintableAscii(absl::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) return false;
  }
  return true;
}

}  // namespace sbp
