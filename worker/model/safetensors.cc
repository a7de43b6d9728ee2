#include "worker/model/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/input_limits.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/model/file_util.h"
#include "worker/model/json_describe.h"

namespace sbp {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts are not supported");

namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// Largest element count accepted in a shape (keeps every size product in int64).
constexpr uint64_t kMaxElements = uint64_t{1} << 62;

struct DTypeEntry {
  SafetensorsDType dtype;
  absl::string_view name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {SafetensorsDType::kF32, "F32", 4}, {SafetensorsDType::kBF16, "BF16", 2},
    {SafetensorsDType::kF16, "F16", 2}, {SafetensorsDType::kF64, "F64", 8},
    {SafetensorsDType::kI32, "I32", 4}, {SafetensorsDType::kI64, "I64", 8},
};

std::string Quote(absl::string_view text) {
  if (text.size() > 200) return absl::StrCat("'", text.substr(0, 197), "...'");
  return absl::StrCat("'", text, "'");
}

// A non-negative JSON integer.
bool AsUnsigned(const Json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(value.get<int64_t>());
    return true;
  }
  return false;
}

// Parses JSON, reporting the byte position of syntax errors and any
// duplicate key (nlohmann would silently keep the last one).
absl::StatusOr<Json> ParseJsonStrict(absl::string_view text, absl::string_view source,
                                     absl::string_view what) {
  // Before parsing: nested values are copied and printed recursively.
  RETURN_IF_ERROR(CheckJsonNesting(text, kMaxInputNestingDepth, absl::StrCat(source, ": ", what)));
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  int duplicate_depth = 0;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
          duplicate_depth = depth;
        }
        break;
      default:
        break;
    }
    return true;
  };
  Json root;
  try {
    root = Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    size_t byte = 0;
    if (const auto* parse_error = dynamic_cast<const Json::parse_error*>(&e)) {
      byte = parse_error->byte;
    }
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", what, " is not valid JSON (at byte ", byte, "): ", e.what()));
  }
  if (!duplicate.empty()) {
    if (duplicate_depth <= 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", what, " has the name ", Quote(duplicate), " twice"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", what, " repeats the key ", Quote(duplicate), " in one object"));
  }
  return root;
}

absl::StatusOr<SafetensorsTensorInfo> ParseEntry(const std::string& name, const Json& entry,
                                                 uint64_t data_size, absl::string_view source) {
  auto error = [&](absl::string_view message) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": tensor ", Quote(name), ": ", message));
  };
  if (!entry.is_object())
    return error(absl::StrCat("entry must be an object (got ", DescribeJsonValue(entry), ")"));
  SafetensorsTensorInfo info;
  info.name = name;

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) return error("missing 'dtype'");
  if (!dtype_it->is_string()) {
    return error(absl::StrCat("'dtype' must be a string (got ", DescribeJsonValue(*dtype_it), ")"));
  }
  const std::string dtype_name = dtype_it->get<std::string>();
  const DTypeEntry* dtype = nullptr;
  for (const DTypeEntry& d : kDTypes) {
    if (d.name == dtype_name) dtype = &d;
  }
  if (dtype == nullptr) {
    return error(absl::StrCat("unsupported dtype ", Quote(dtype_name),
                              " (supported: F32, BF16, F16, F64, I32, I64)"));
  }
  info.dtype = dtype->dtype;

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) return error("missing 'shape'");
  if (!shape_it->is_array()) {
    return error(absl::StrCat("'shape' must be a list (got ", DescribeJsonValue(*shape_it), ")"));
  }
  uint64_t nonzero_product = 1;
  bool has_zero = false;
  for (size_t i = 0; i < shape_it->size(); ++i) {
    const Json& dim = (*shape_it)[i];
    uint64_t value = 0;
    if (!AsUnsigned(dim, &value)) {
      return error(absl::StrCat("'shape' element ", i, " must be a non-negative integer (got ",
                                DescribeJsonValue(dim), ")"));
    }
    if (value == 0) {
      has_zero = true;
    } else if (value > kMaxElements || nonzero_product > kMaxElements / value) {
      return error("'shape' has too many elements");
    } else {
      nonzero_product *= value;
    }
    info.shape.push_back(static_cast<int64_t>(value));
  }
  const uint64_t numel = has_zero ? 0 : nonzero_product;

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end()) return error("missing 'data_offsets'");
  if (!offsets_it->is_array() || offsets_it->size() != 2 ||
      !AsUnsigned((*offsets_it)[0], &info.begin) || !AsUnsigned((*offsets_it)[1], &info.end)) {
    return error("'data_offsets' must be [begin, end] with non-negative integers");
  }
  if (info.begin > info.end) {
    return error(
        absl::StrCat("data_offsets [", info.begin, ", ", info.end, "] has begin after end"));
  }
  if (info.end > data_size) {
    return error(absl::StrCat("data_offsets [", info.begin, ", ", info.end,
                              "] lie outside the data section (", data_size, " bytes)"));
  }
  // numel <= 2^62 and size <= 8, but the product may still exceed 2^64.
  const uint64_t range = info.end - info.begin;
  const bool too_many = numel > std::numeric_limits<uint64_t>::max() / dtype->size;
  if (too_many || numel * dtype->size != range) {
    return error(absl::StrCat("shape ", ShapeString(info.shape), " of ", dtype->name, " needs ",
                              too_many ? std::string("more than 2^64 bytes")
                                       : absl::StrCat(numel * dtype->size, " bytes"),
                              " but data_offsets [", info.begin, ", ", info.end, "] hold ", range));
  }
  return info;
}

}  // namespace

absl::string_view SafetensorsDTypeName(SafetensorsDType dtype) {
  for (const DTypeEntry& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

size_t SafetensorsDTypeSize(SafetensorsDType dtype) {
  for (const DTypeEntry& d : kDTypes) {
    if (d.dtype == dtype) return d.size;
  }
  return 0;
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in f32.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    std::memcpy(&out, &magnitude, 4);
    out |= sign;
  } else if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);  // inf, or NaN keeping its payload
  } else {
    out = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &out, 4);
  return value;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view header_json,
                                                         uint64_t data_size,
                                                         absl::string_view source) {
  ASSIGN_OR_RETURN(Json root, ParseJsonStrict(header_json, source, "header"));
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": header must be a JSON object (got ", root.type_name(), ")"));
  }
  SafetensorsHeader header;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it->is_null()) continue;
      if (!it->is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(
            source, ": __metadata__ must be an object (got ", DescribeJsonValue(*it), ")"));
      }
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(source, ": __metadata__ must map strings to strings (key ",
                           Quote(m.key()), " has ", DescribeJsonValue(*m), ")"));
        }
        header.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    ASSIGN_OR_RETURN(SafetensorsTensorInfo info, ParseEntry(it.key(), *it, data_size, source));
    header.tensors.push_back(std::move(info));
  }
  std::stable_sort(header.tensors.begin(), header.tensors.end(),
                   [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  // Non-empty ranges must not overlap (empty ones hold no bytes).
  const SafetensorsTensorInfo* previous = nullptr;
  for (const SafetensorsTensorInfo& info : header.tensors) {
    if (info.begin == info.end) continue;
    if (previous != nullptr && info.begin < previous->end) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": tensors ", Quote(previous->name), " [", previous->begin, ", ",
                       previous->end, ") and ", Quote(info.name), " [", info.begin, ", ", info.end,
                       ") have overlapping data_offsets"));
    }
    if (previous == nullptr || info.end > previous->end) previous = &info;
  }
  return header;
}

// Owns the bytes of an open file: a memory map or an in-memory copy.
struct SafetensorsFile::Storage {
  std::unique_ptr<MappedFile> mapped;
  std::string owned;
  absl::string_view bytes() const { return mapped ? mapped->bytes() : absl::string_view(owned); }
};

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  auto storage = std::make_shared<Storage>();
  ASSIGN_OR_RETURN(storage->mapped, MappedFile::Open(path));
  return FromStorage(std::move(storage), path);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::FromBytes(std::string bytes,
                                                           absl::string_view source) {
  auto storage = std::make_shared<Storage>();
  storage->owned = std::move(bytes);
  return FromStorage(std::move(storage), std::string(source));
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::FromStorage(std::shared_ptr<const Storage> storage,
                                                             std::string source) {
  const absl::string_view bytes = storage->bytes();
  if (bytes.size() < 8) {
    return absl::InvalidArgumentError(absl::StrCat(source,
                                                   ": file is too short for a safetensors header (",
                                                   bytes.size(), " bytes, need at least 8)"));
  }
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), 8);
  if (header_size > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": header length ", header_size,
                                                   " exceeds the limit of ",
                                                   kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (header_size > bytes.size() - 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": header length ", header_size, " runs past the end of the file (",
                     bytes.size(), " bytes); the file is truncated or not safetensors"));
  }
  SafetensorsFile file;
  const absl::string_view header_json = bytes.substr(8, header_size);
  file.data_ = bytes.substr(8 + header_size);
  ASSIGN_OR_RETURN(file.header_, ParseSafetensorsHeader(header_json, file.data_.size(), source));
  for (size_t i = 0; i < file.header_.tensors.size(); ++i) {
    file.index_.emplace(file.header_.tensors[i].name, i);
  }
  file.storage_ = std::move(storage);
  file.path_ = std::move(source);
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  names.reserve(header_.tensors.size());
  for (const SafetensorsTensorInfo& info : header_.tensors) names.push_back(info.name);
  return names;
}

bool SafetensorsFile::Contains(absl::string_view name) const {
  return index_.find(name) != index_.end();
}

absl::StatusOr<const SafetensorsTensorInfo*> SafetensorsFile::Info(absl::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor named ", Quote(name)));
  }
  return &header_.tensors[it->second];
}

absl::StatusOr<SafetensorsDType> SafetensorsFile::dtype(absl::string_view name) const {
  ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, Info(name));
  return info->dtype;
}

absl::StatusOr<Shape> SafetensorsFile::shape(absl::string_view name) const {
  ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, Info(name));
  return info->shape;
}

absl::StatusOr<absl::string_view> SafetensorsFile::RawBytes(absl::string_view name) const {
  ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, Info(name));
  return data_.substr(info->begin, info->end - info->begin);
}

absl::StatusOr<Tensor> SafetensorsFile::ReadAsF32(absl::string_view name,
                                                  Allocator& allocator) const {
  ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, Info(name));
  if (info->dtype == SafetensorsDType::kI32 || info->dtype == SafetensorsDType::kI64) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor ", Quote(name), " is ", SafetensorsDTypeName(info->dtype),
                     "; only floating-point tensors can be read as f32"));
  }
  ASSIGN_OR_RETURN(Tensor tensor, Tensor::Empty(allocator, info->shape, DType::kF32, name));
  const char* src = data_.data() + info->begin;
  float* dst = tensor.data<float>();
  const int64_t n = tensor.numel();
  switch (info->dtype) {
    case SafetensorsDType::kF32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      break;
    case SafetensorsDType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        dst[i] = Bf16ToFloat(bits);
      }
      break;
    case SafetensorsDType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        dst[i] = HalfToFloat(bits);
      }
      break;
    case SafetensorsDType::kF64:
      for (int64_t i = 0; i < n; ++i) {
        double value;
        std::memcpy(&value, src + 8 * i, 8);
        dst[i] = static_cast<float>(value);
      }
      break;
    case SafetensorsDType::kI32:
    case SafetensorsDType::kI64:
      break;
  }
  return tensor;
}

// ---------------------------------------------------------------------------
// Writer.

namespace {

absl::StatusOr<SafetensorsDType> StoredDType(const Tensor& tensor, DType storage) {
  if (tensor.dtype() == DType::kI32) return SafetensorsDType::kI32;
  return storage == DType::kBF16 ? SafetensorsDType::kBF16 : SafetensorsDType::kF32;
}

absl::Status CheckWritable(const std::string& path, const NamedTensors& tensors, DType storage) {
  if (storage != DType::kF32 && storage != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": storage dtype must be f32 or bf16 (got ", DTypeName(storage), ")"));
  }
  std::set<absl::string_view> seen;
  for (const auto& named : tensors) {
    const std::string& name = named.first;
    const Tensor& tensor = named.second;
    auto error = [&](absl::string_view message) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor ", Quote(name), ": ", message));
    };
    if (name == "__metadata__") return error("the name is reserved");
    if (!seen.insert(name).second) return error("the name is given twice");
    if (!tensor.defined() && tensor.numel() != 0) return error("tensor is undefined");
    if (!tensor.device().is_cpu()) return error("tensor must be on the host");
    if (!tensor.is_contiguous()) return error("tensor must be contiguous");
  }
  return absl::OkStatus();
}

// Appends `tensor` converted to `stored`, a chunk at a time.
absl::Status AppendTensor(AtomicFileWriter& writer, const Tensor& tensor, SafetensorsDType stored) {
  const int64_t n = tensor.numel();
  if (n == 0) return absl::OkStatus();
  const bool same = (stored == SafetensorsDType::kF32 && tensor.dtype() == DType::kF32) ||
                    (stored == SafetensorsDType::kBF16 && tensor.dtype() == DType::kBF16) ||
                    (stored == SafetensorsDType::kI32 && tensor.dtype() == DType::kI32);
  if (same) {
    return writer.Append(
        absl::string_view(static_cast<const char*>(tensor.raw_data()), tensor.nbytes()));
  }
  constexpr int64_t kChunk = int64_t{1} << 18;
  std::string buffer;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t end = std::min(n, begin + kChunk);
    if (stored == SafetensorsDType::kBF16) {  // f32 -> bf16
      buffer.resize(static_cast<size_t>(end - begin) * 2);
      const float* src = tensor.data<float>();
      for (int64_t i = begin; i < end; ++i) {
        const bf16_t bits = FloatToBf16(src[i]);
        std::memcpy(&buffer[static_cast<size_t>(i - begin) * 2], &bits, 2);
      }
    } else {  // bf16 -> f32
      buffer.resize(static_cast<size_t>(end - begin) * 4);
      const bf16_t* src = tensor.data<bf16_t>();
      for (int64_t i = begin; i < end; ++i) {
        const float value = Bf16ToFloat(src[i]);
        std::memcpy(&buffer[static_cast<size_t>(i - begin) * 4], &value, 4);
      }
    }
    RETURN_IF_ERROR(writer.Append(buffer));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t StoredTensorBytes(const Tensor& tensor, DType storage) {
  auto stored = StoredDType(tensor, storage);
  return tensor.numel() * static_cast<int64_t>(SafetensorsDTypeSize(*stored));
}

absl::Status WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                              const SafetensorsMetadata& metadata, DType storage) {
  RETURN_IF_ERROR(CheckWritable(path, tensors, storage));
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson meta = OrderedJson::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  std::vector<SafetensorsDType> stored;
  for (const auto& [name, tensor] : tensors) {
    ASSIGN_OR_RETURN(SafetensorsDType dtype, StoredDType(tensor, storage));
    stored.push_back(dtype);
    const uint64_t bytes = static_cast<uint64_t>(tensor.numel()) * SafetensorsDTypeSize(dtype);
    header[name] = OrderedJson{{"dtype", std::string(SafetensorsDTypeName(dtype))},
                               {"shape", tensor.shape()},
                               {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header_text;
  try {
    header_text = header.dump(-1, ' ', false, OrderedJson::error_handler_t::strict);
  } catch (const OrderedJson::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": a tensor name or metadata entry is not valid UTF-8 (", e.what(), ")"));
  }
  // Pad with spaces so that the data section starts 8-byte aligned.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  if (header_text.size() > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": header would be ", header_text.size(), " bytes, over the limit"));
  }
  const uint64_t header_size = header_text.size();
  char prefix[8];
  std::memcpy(prefix, &header_size, 8);

  ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> writer, AtomicFileWriter::Create(path));
  RETURN_IF_ERROR(writer->Append(absl::string_view(prefix, 8)));
  RETURN_IF_ERROR(writer->Append(header_text));
  for (size_t i = 0; i < tensors.size(); ++i) {
    RETURN_IF_ERROR(AppendTensor(*writer, tensors[i].second, stored[i]));
  }
  return writer->Commit();
}

// ---------------------------------------------------------------------------
// Sharded files.

absl::StatusOr<ShardedSafetensors> ShardedSafetensors::OpenIndex(const std::string& index_path) {
  ASSIGN_OR_RETURN(std::string text,
                   ReadRegularFile(index_path, kMaxSafetensorsIndexBytes, "a safetensors index"));
  ASSIGN_OR_RETURN(Json root, ParseJsonStrict(text, index_path, "index"));
  auto error = [&](absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": ", message));
  };
  if (!root.is_object()) {
    return error(absl::StrCat("index must be a JSON object (got ", root.type_name(), ")"));
  }
  ShardedSafetensors sharded;
  sharded.source_ = index_path;
  std::filesystem::path dir = std::filesystem::path(index_path).parent_path();
  sharded.dir_ = dir.empty() ? std::string(".") : dir.string();
  auto meta = root.find("metadata");
  if (meta != root.end() && !meta->is_null()) {
    if (!meta->is_object()) return error("'metadata' must be an object");
    for (auto it = meta->begin(); it != meta->end(); ++it) {
      sharded.metadata_[it.key()] = it->is_string()
                                        ? it->get<std::string>()
                                        : it->dump(-1, ' ', false, Json::error_handler_t::replace);
    }
  }
  auto map = root.find("weight_map");
  std::set<std::string> shards;
  if (map == root.end() || !map->is_object()) {
    return error("'weight_map' must be an object mapping tensor names to shard files");
  }
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it->is_string()) {
      return error(absl::StrCat("weight_map entry ", Quote(it.key()), " must be a file name (got ",
                                DescribeJsonValue(*it), ")"));
    }
    const std::string file = it->get<std::string>();
    const std::filesystem::path file_path(file);
    bool plain = !file.empty() && file_path.is_relative();
    for (const auto& part : file_path) plain = plain && part != "..";
    if (!plain) {
      return error(absl::StrCat("weight_map entry ", Quote(it.key()), " names ", Quote(file),
                                ", which is not a file inside the model directory"));
    }
    sharded.weight_map_.emplace(it.key(), file);
    shards.insert(file);
    if (shards.size() > kMaxSafetensorsShards) {
      return error(absl::StrCat("weight_map names more than ", kMaxSafetensorsShards,
                                " shard files, the limit"));
    }
  }
  return sharded;
}

ShardedSafetensors ShardedSafetensors::FromFile(SafetensorsFile file) {
  ShardedSafetensors sharded;
  sharded.source_ = file.path();
  std::filesystem::path dir = std::filesystem::path(file.path()).parent_path();
  sharded.dir_ = dir.empty() ? std::string(".") : dir.string();
  const std::string shard = std::filesystem::path(file.path()).filename().string();
  for (const std::string& name : file.names()) sharded.weight_map_.emplace(name, shard);
  sharded.metadata_ = file.metadata();
  sharded.open_.emplace(shard, std::make_unique<SafetensorsFile>(std::move(file)));
  return sharded;
}

std::vector<std::string> ShardedSafetensors::names() const {
  std::vector<std::string> names;
  names.reserve(weight_map_.size());
  for (const auto& [name, file] : weight_map_) names.push_back(name);
  return names;
}

bool ShardedSafetensors::Contains(absl::string_view name) const {
  return weight_map_.find(name) != weight_map_.end();
}

absl::StatusOr<const SafetensorsFile*> ShardedSafetensors::Shard(absl::string_view name) {
  auto it = weight_map_.find(name);
  if (it == weight_map_.end()) {
    return absl::NotFoundError(absl::StrCat(source_, ": no tensor named ", Quote(name)));
  }
  auto open = open_.find(it->second);
  if (open == open_.end()) {
    const std::string path = (std::filesystem::path(dir_) / it->second).string();
    auto file = SafetensorsFile::Open(path);
    if (!file.ok()) {
      return Annotate(file.status(), absl::StrCat(source_, ": shard of tensor ", Quote(name)));
    }
    open = open_.emplace(it->second, std::make_unique<SafetensorsFile>(*std::move(file))).first;
  }
  if (!open->second->Contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": the index puts tensor ", Quote(name),
                                                   " in ", Quote(it->second),
                                                   ", which does not contain it"));
  }
  return open->second.get();
}

absl::StatusOr<SafetensorsTensorInfo> ShardedSafetensors::Info(absl::string_view name) {
  ASSIGN_OR_RETURN(const SafetensorsFile* shard, Shard(name));
  ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, shard->Info(name));
  return *info;
}

absl::StatusOr<Tensor> ShardedSafetensors::ReadAsF32(absl::string_view name, Allocator& allocator) {
  ASSIGN_OR_RETURN(const SafetensorsFile* shard, Shard(name));
  return shard->ReadAsF32(name, allocator);
}

absl::StatusOr<std::vector<std::string>> WriteShardedSafetensors(
    const std::string& dir, absl::string_view base, const NamedTensors& tensors,
    const SafetensorsMetadata& metadata, DType storage, int64_t max_shard_bytes) {
  const std::string index_path =
      (std::filesystem::path(dir) / absl::StrCat(base, ".safetensors.index.json")).string();
  RETURN_IF_ERROR(CheckWritable(index_path, tensors, storage));
  if (max_shard_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": max shard size must be positive (got ", max_shard_bytes, ")"));
  }
  // Greedy split in the given order.
  std::vector<NamedTensors> shards;
  int64_t shard_bytes = 0;
  int64_t total_bytes = 0;
  for (const auto& named : tensors) {
    const int64_t bytes = StoredTensorBytes(named.second, storage);
    if (shards.empty() || (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(named);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  if (shards.empty()) shards.emplace_back();
  std::vector<std::string> files;
  OrderedJson weight_map = OrderedJson::object();
  std::map<std::string, std::string> sorted_map;
  for (size_t i = 0; i < shards.size(); ++i) {
    files.push_back(absl::StrFormat("%s-%05d-of-%05d.safetensors", std::string(base),
                                    static_cast<int>(i + 1), static_cast<int>(shards.size())));
    RETURN_IF_ERROR(WriteSafetensors((std::filesystem::path(dir) / files.back()).string(),
                                     shards[i], metadata, storage));
    for (const auto& named : shards[i]) sorted_map[named.first] = files.back();
  }
  for (const auto& [name, file] : sorted_map) weight_map[name] = file;
  OrderedJson index = OrderedJson::object();
  index["metadata"] = OrderedJson{{"total_size", total_bytes}};
  index["weight_map"] = std::move(weight_map);
  std::string text;
  try {
    text = index.dump(2, ' ', false, OrderedJson::error_handler_t::strict) + "\n";
  } catch (const OrderedJson::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": a tensor name is not valid UTF-8 (", e.what(), ")"));
  }
  RETURN_IF_ERROR(WriteFileAtomically(index_path, text));
  return files;
}

absl::StatusOr<ShardedSafetensors> OpenSafetensorsDirectory(const std::string& dir) {
  const std::filesystem::path root(dir);
  const std::string single = (root / "model.safetensors").string();
  const std::string index = (root / "model.safetensors.index.json").string();
  std::error_code ec;
  if (std::filesystem::exists(single, ec)) {
    ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(single));
    return ShardedSafetensors::FromFile(std::move(file));
  }
  if (std::filesystem::exists(index, ec)) return ShardedSafetensors::OpenIndex(index);
  return absl::NotFoundError(
      absl::StrCat(dir, ": no model.safetensors or model.safetensors.index.json in the directory"));
}

}  // namespace sbp
