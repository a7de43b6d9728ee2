// safetensors files (https://github.com/huggingface/safetensors format):
//   [u64 little-endian N][N bytes of JSON header][data]
// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin,
// end)} with offsets relative to the data section, plus an optional
// "__metadata__" string->string map. Writers pad the header with spaces so
// that the data section starts at a multiple of 8 bytes.
//
// SafetensorsFile validates everything before any data is touched (header
// length, JSON, dtypes, shapes, offsets inside the file, sizes matching
// shapes, no overlapping ranges, unique names): a malformed file is an
// InvalidArgument naming the problem, never a crash. Files are memory-mapped,
// not copied, and every tensor's bytes must lie inside the file and match its
// shape exactly (overflow-checked), so a header cannot make a reader allocate
// more than the file holds; ReadAsF32 allocates through the caller's
// allocator (and its budget). ShardedSafetensors reads the
// `model.safetensors.index.json` layout, opening shards on first use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/allocator.h"
#include "kernels/tensor.h"

namespace sbp {

// Element types accepted on disk ("F32", "BF16", "F16", "F64", "I32", "I64").
enum class SafetensorsDType : uint8_t { kF32, kBF16, kF16, kF64, kI32, kI64 };

absl::string_view SafetensorsDTypeName(SafetensorsDType dtype);
size_t SafetensorsDTypeSize(SafetensorsDType dtype);

// IEEE half (binary16) bits -> f32, exact (subnormals, infinities, NaN).
float HalfToFloat(uint16_t bits);

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using SafetensorsMetadata = std::map<std::string, std::string>;

// Largest header accepted (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// Largest model.safetensors.index.json read (a 1000-shard model's is ~10 MB),
// and the most shard files one index may name: each open shard is a memory
// map, and a process has at most 65530 of them.
inline constexpr int64_t kMaxSafetensorsIndexBytes = int64_t{64} << 20;
inline constexpr size_t kMaxSafetensorsShards = 10000;

struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  Shape shape;
  uint64_t begin = 0;  // byte range [begin, end) within the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensorInfo> tensors;  // ordered by data offset
  SafetensorsMetadata metadata;
};

// Parses and validates the JSON header of a file whose data section holds
// `data_size` bytes. `source` prefixes error messages. Exposed for the fuzzer.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view header_json,
                                                         uint64_t data_size,
                                                         absl::string_view source);

class SafetensorsFile {
 public:
  // Memory-maps `path` and validates it.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);
  // Validates a file image held in memory; `source` names it in errors.
  static absl::StatusOr<SafetensorsFile> FromBytes(std::string bytes,
                                                   absl::string_view source = "<memory>");

  const std::string& path() const { return path_; }
  // Tensor names in data-offset order.
  std::vector<std::string> names() const;
  const std::vector<SafetensorsTensorInfo>& tensors() const { return header_.tensors; }
  const SafetensorsMetadata& metadata() const { return header_.metadata; }

  bool Contains(absl::string_view name) const;
  // NotFound for an unknown name (as are the accessors below).
  absl::StatusOr<const SafetensorsTensorInfo*> Info(absl::string_view name) const;
  absl::StatusOr<SafetensorsDType> dtype(absl::string_view name) const;
  absl::StatusOr<Shape> shape(absl::string_view name) const;
  // The stored little-endian bytes of a tensor (valid while this file lives).
  absl::StatusOr<absl::string_view> RawBytes(absl::string_view name) const;
  // Host f32 copy, converting BF16/F16/F64; integer tensors are an error.
  absl::StatusOr<Tensor> ReadAsF32(absl::string_view name, Allocator& allocator) const;

 private:
  struct Storage;
  SafetensorsFile() = default;
  static absl::StatusOr<SafetensorsFile> FromStorage(std::shared_ptr<const Storage> storage,
                                                     std::string source);

  std::shared_ptr<const Storage> storage_;
  std::string path_;
  absl::string_view data_;  // the data section
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> header_.tensors index
};

// Writes `tensors` (defined, contiguous host tensors, f32/bf16/i32) to `path`
// in the given order. Floating-point tensors are stored as `storage` (kF32 or
// kBF16, converting with round-to-nearest-even); i32 tensors stay I32. The
// file appears atomically (written to `path.tmp`, fsynced, renamed).
absl::Status WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                              const SafetensorsMetadata& metadata, DType storage);

// Bytes WriteSafetensors would store for `tensor` as `storage`.
int64_t StoredTensorBytes(const Tensor& tensor, DType storage);

// Tensors spread over several files, found through an index
// ({"metadata": {...}, "weight_map": {name: file}}), or a single file. The
// index is a regular file of at most kMaxSafetensorsIndexBytes naming at most
// kMaxSafetensorsShards files, each inside the index's directory.
// Shards open lazily, so a ShardedSafetensors is not thread-safe.
class ShardedSafetensors {
 public:
  // Reads and checks the index; shards are opened on first use.
  static absl::StatusOr<ShardedSafetensors> OpenIndex(const std::string& index_path);
  // A single already open file.
  static ShardedSafetensors FromFile(SafetensorsFile file);

  // Tensor names (sorted).
  std::vector<std::string> names() const;
  // Index metadata (non-string values as JSON text, e.g. total_size).
  const SafetensorsMetadata& metadata() const { return metadata_; }
  bool Contains(absl::string_view name) const;
  // The shard holding `name`, opening (and validating) it if needed; an
  // index entry whose shard lacks the tensor is an error.
  absl::StatusOr<const SafetensorsFile*> Shard(absl::string_view name);
  absl::StatusOr<SafetensorsTensorInfo> Info(absl::string_view name);
  absl::StatusOr<Tensor> ReadAsF32(absl::string_view name, Allocator& allocator);

 private:
  ShardedSafetensors() = default;
  std::string source_;
  std::string dir_;
  std::map<std::string, std::string, std::less<>> weight_map_;    // name -> shard file
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;  // shard file -> file
  SafetensorsMetadata metadata_;
};

// Writes `tensors` into `dir` as `<base>-00001-of-0000N.safetensors` shards
// of at most `max_shard_bytes` of data each (a larger tensor gets a shard of
// its own), then `<base>.safetensors.index.json`. Returns the shard names.
absl::StatusOr<std::vector<std::string>> WriteShardedSafetensors(
    const std::string& dir, absl::string_view base, const NamedTensors& tensors,
    const SafetensorsMetadata& metadata, DType storage, int64_t max_shard_bytes);

// Opens `dir/model.safetensors`, else `dir/model.safetensors.index.json`
// (the order Hugging Face uses); NotFound when neither exists.
absl::StatusOr<ShardedSafetensors> OpenSafetensorsDirectory(const std::string& dir);

}  // namespace sbp
