#include "worker/model/model_io.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_confinement.h"
#include "common/status_macros.h"
#include "kernels/random.h"
#include "worker/model/file_util.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

constexpr char kConfigFile[] = "config.json";
constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

bool IsIgnoredBuffer(absl::string_view name) { return absl::EndsWith(name, "rotary_emb.inv_freq"); }

bool IsShardFileName(const std::string& name) {
  static const std::regex pattern("model-[0-9]{5}-of-[0-9]{5}\\.safetensors");
  return std::regex_match(name, pattern);
}

absl::Status FsError(absl::string_view what, const fs::path& path, const std::error_code& ec) {
  return absl::InternalError(absl::StrCat(path.string(), ": ", what, " failed: ", ec.message()));
}

absl::Status RemoveIfExists(const fs::path& path) {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) return FsError("remove", path, ec);
  return absl::OkStatus();
}

// Writes config.json and the weights into the existing directory `dir`, then
// removes weight files that belong to the other layout or an older sharding.
absl::Status WriteModelFiles(const fs::path& dir, const ModelConfig& config,
                             const NamedTensors& ordered, DType storage, int64_t max_shard_bytes) {
  const SafetensorsMetadata metadata = {{"format", "pt"}};
  int64_t total_bytes = 0;
  for (const auto& named : ordered) total_bytes += StoredTensorBytes(named.second, storage);
  std::set<std::string> keep;
  if (max_shard_bytes > 0 && total_bytes > max_shard_bytes) {
    ASSIGN_OR_RETURN(std::vector<std::string> shards,
                     WriteShardedSafetensors(dir.string(), "model", ordered, metadata, storage,
                                             max_shard_bytes));
    keep.insert(shards.begin(), shards.end());
    RETURN_IF_ERROR(RemoveIfExists(dir / kSingleFile));
  } else {
    RETURN_IF_ERROR(WriteSafetensors((dir / kSingleFile).string(), ordered, metadata, storage));
    RETURN_IF_ERROR(RemoveIfExists(dir / kIndexFile));
  }
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (IsShardFileName(name) && keep.count(name) == 0) {
      RETURN_IF_ERROR(RemoveIfExists(entry.path()));
    }
  }
  if (ec) return FsError("list", dir, ec);
  RETURN_IF_ERROR(WriteFileAtomically((dir / kConfigFile).string(), ModelConfigToJson(config)));
  return SyncDirectory(dir.string());
}

}  // namespace

const Tensor* ModelWeights::Find(absl::string_view name) const {
  for (const auto& [param_name, tensor] : params) {
    if (param_name == name) return &tensor;
  }
  return nullptr;
}

Tensor* ModelWeights::Find(absl::string_view name) {
  for (auto& [param_name, tensor] : params) {
    if (param_name == name) return &tensor;
  }
  return nullptr;
}

absl::StatusOr<Tensor> ModelWeights::Get(absl::string_view name) const {
  const Tensor* tensor = Find(name);
  if (tensor == nullptr) {
    return absl::NotFoundError(absl::StrCat("model has no parameter named '", name, "'"));
  }
  return *tensor;
}

absl::StatusOr<ModelWeights> LoadModelDirectory(const std::string& dir, Allocator& allocator) {
  if (!allocator.device().is_cpu()) {
    return absl::InvalidArgumentError("LoadModelDirectory needs a host allocator");
  }
  ModelWeights weights;
  ASSIGN_OR_RETURN(weights.config, LoadModelConfig((fs::path(dir) / kConfigFile).string()));
  const ModelConfig& config = weights.config;
  ASSIGN_OR_RETURN(ShardedSafetensors source, OpenSafetensorsDirectory(dir));

  // Presence and shape of everything before any data is read.
  const std::vector<ParamSpec> specs = ParameterSpecs(config);
  std::set<std::string, std::less<>> expected;
  for (const ParamSpec& spec : specs) {
    expected.insert(spec.name);
    if (!source.Contains(spec.name)) {
      return absl::NotFoundError(absl::StrCat(dir, ": tensor '", spec.name, "' (shape ",
                                              ShapeString(spec.shape), ") is missing"));
    }
    ASSIGN_OR_RETURN(SafetensorsTensorInfo info, source.Info(spec.name));
    if (info.shape != spec.shape) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": tensor '", spec.name, "' has shape ",
                                                     ShapeString(info.shape), ", expected ",
                                                     ShapeString(spec.shape)));
    }
  }
  const bool tied_head_present = config.tie_word_embeddings && source.Contains("lm_head.weight");
  std::vector<std::string> extras;
  for (const std::string& name : source.names()) {
    if (expected.count(name) > 0 || IsIgnoredBuffer(name)) continue;
    if (tied_head_present && name == "lm_head.weight") continue;
    extras.push_back(name);
  }
  if (!extras.empty()) {
    const size_t shown = std::min<size_t>(extras.size(), 5);
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": ", extras.size(), " unexpected tensor(s) for ",
        ArchitectureClassName(config.architecture),
        " with this config.json: ", absl::StrJoin(extras.begin(), extras.begin() + shown, ", "),
        extras.size() > shown ? ", ..." : ""));
  }

  for (const ParamSpec& spec : specs) {
    ASSIGN_OR_RETURN(Tensor tensor, source.ReadAsF32(spec.name, allocator));
    weights.params.emplace_back(spec.name, std::move(tensor));
  }

  if (tied_head_present) {
    const Tensor& embedding = weights.params.front().second;
    ASSIGN_OR_RETURN(SafetensorsTensorInfo info, source.Info("lm_head.weight"));
    if (info.shape != embedding.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": tie_word_embeddings is true but 'lm_head.weight' has shape ",
          ShapeString(info.shape), ", not the embedding's ", ShapeString(embedding.shape())));
    }
    ASSIGN_OR_RETURN(SafetensorsTensorInfo embedding_info,
                     source.Info("model.embed_tokens.weight"));
    bool equal;
    if (info.dtype == embedding_info.dtype) {  // compare the stored bytes, no copy
      ASSIGN_OR_RETURN(const SafetensorsFile* head_file, source.Shard("lm_head.weight"));
      ASSIGN_OR_RETURN(const SafetensorsFile* embedding_file,
                       source.Shard("model.embed_tokens.weight"));
      equal = *head_file->RawBytes("lm_head.weight") ==
              *embedding_file->RawBytes("model.embed_tokens.weight");
    } else {
      ASSIGN_OR_RETURN(Tensor head, source.ReadAsF32("lm_head.weight", allocator));
      equal = std::memcmp(head.raw_data(), embedding.raw_data(), embedding.nbytes()) == 0;
    }
    if (!equal) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir,
                       ": tie_word_embeddings is true but 'lm_head.weight' differs from "
                       "'model.embed_tokens.weight'"));
    }
  }
  return weights;
}

absl::Status CheckModelParameters(const ModelConfig& config, const NamedTensors& params) {
  std::map<std::string, const Tensor*, std::less<>> given;
  for (const auto& [name, tensor] : params) {
    if (!given.emplace(name, &tensor).second) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' is given twice"));
    }
  }
  for (const ParamSpec& spec : ParameterSpecs(config)) {
    auto it = given.find(spec.name);
    if (it == given.end()) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", spec.name, "' (shape ",
                                                     ShapeString(spec.shape), ") is missing"));
    }
    if (it->second->shape() != spec.shape) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", spec.name, "' has shape ",
                                                     ShapeString(it->second->shape()),
                                                     ", expected ", ShapeString(spec.shape)));
    }
    if (it->second->dtype() == DType::kI32) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", spec.name, "' is i32, not a floating-point tensor"));
    }
    given.erase(it);
  }
  if (!given.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", given.begin()->first, "' is not part of a ",
                     ArchitectureClassName(config.architecture), " with this config"));
  }
  return absl::OkStatus();
}

absl::Status SaveModelDirectory(const std::string& dir, const ModelConfig& config,
                                const NamedTensors& params, DType storage,
                                int64_t max_shard_bytes) {
  fs::path target = fs::path(dir).lexically_normal();
  if (target.has_filename() == false && target.has_parent_path()) target = target.parent_path();
  const std::string config_path = (target / kConfigFile).string();
  RETURN_IF_ERROR(ValidateModelConfig(config, config_path));
  RETURN_IF_ERROR(Annotate(CheckModelParameters(config, params), target.string()));
  if (storage != DType::kF32 && storage != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        target.string(), ": weights are stored as f32 or bf16 (got ", DTypeName(storage), ")"));
  }
  NamedTensors ordered;
  for (const ParamSpec& spec : ParameterSpecs(config)) {
    for (const auto& named : params) {
      if (named.first == spec.name) ordered.push_back(named);
    }
  }

  RETURN_IF_ERROR(CheckConfinedPath(target.string(), FileAccess::kWrite));
  std::error_code ec;
  if (fs::exists(target, ec)) {
    if (!fs::is_directory(target, ec)) {
      return absl::FailedPreconditionError(
          absl::StrCat(target.string(), ": exists and is not a directory"));
    }
    return WriteModelFiles(target, config, ordered, storage, max_shard_bytes);
  }
  // New directory: build it under a temporary name, then rename it in place.
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec) return FsError("create directory", parent, ec);
  const fs::path temp = fs::path(absl::StrCat(target.string(), ".tmp-", ::getpid()));
  fs::remove_all(temp, ec);
  fs::create_directory(temp, ec);
  if (ec) return FsError("create directory", temp, ec);
  absl::Status status = WriteModelFiles(temp, config, ordered, storage, max_shard_bytes);
  if (status.ok()) {
    fs::rename(temp, target, ec);
    if (ec) status = FsError(absl::StrCat("rename to ", target.string()), temp, ec);
  }
  if (!status.ok()) {
    std::error_code ignored;
    fs::remove_all(temp, ignored);
    return status;
  }
  return SyncDirectory(parent.string());
}

absl::StatusOr<ModelWeights> InitModelWeights(const ModelConfig& config, uint64_t seed,
                                              Allocator& allocator) {
  RETURN_IF_ERROR(ValidateModelConfig(config, "model config"));
  if (!allocator.device().is_cpu()) {
    return absl::InvalidArgumentError("InitModelWeights needs a host allocator");
  }
  ModelWeights weights;
  weights.config = config;
  const std::vector<ParamSpec> specs = ParameterSpecs(config);
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& spec = specs[i];
    ASSIGN_OR_RETURN(Tensor tensor, Tensor::Empty(allocator, spec.shape, DType::kF32, spec.name));
    if (spec.kind == ParamKind::kNorm) {
      std::fill_n(tensor.data<float>(), tensor.numel(), 1.0f);
    } else {
      FillNormal(tensor, HashIndex(seed, i), 0.0f, 0.02f);
    }
    weights.params.emplace_back(spec.name, std::move(tensor));
  }
  return weights;
}

}  // namespace sbp
