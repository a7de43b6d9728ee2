#include "worker/train/peft_adapter.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "kernels/allocator.h"
#include "nlohmann/json.hpp"
#include "worker/engine/lora_store.h"
#include "worker/model/file_util.h"
#include "worker/model/safetensors.h"

namespace sbp {
namespace {

using Json = nlohmann::json;

constexpr char kConfigFile[] = "adapter_config.json";
constexpr char kWeightsFile[] = "adapter_model.safetensors";
constexpr int64_t kMaxAdapterConfigBytes = int64_t{1} << 20;

// A field that must have its plain-LoRA value (absent is fine).
absl::Status ExpectPlain(const Json& j, const std::string& path, const char* key,
                         const Json& plain) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null() || *it == plain) return absl::OkStatus();
  if ((plain.is_null() || plain.is_object()) && (it->is_object() || it->is_array()) &&
      it->empty()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": ", key, " is ", it->dump(), "; only plain LoRA (", plain.dump(), ") is supported"));
}

}  // namespace

std::string PeftAdapterConfigJson(const LoraOptions& o, const std::string& base_model) {
  Json j = {{"peft_type", "LORA"},
            {"task_type", "CAUSAL_LM"},
            {"base_model_name_or_path", base_model.empty() ? Json(nullptr) : Json(base_model)},
            {"inference_mode", true},
            {"r", o.r},
            {"lora_alpha", o.alpha},
            {"target_modules", o.target_modules},
            {"use_rslora", o.rslora},
            {"lora_dropout", 0.0},
            {"bias", "none"},
            {"fan_in_fan_out", false},
            {"init_lora_weights", true},
            {"use_dora", false},
            {"modules_to_save", nullptr},
            {"layers_to_transform", nullptr},
            {"layers_pattern", nullptr},
            {"rank_pattern", Json::object()},
            {"alpha_pattern", Json::object()}};
  return j.dump(2) + "\n";
}

absl::Status SavePeftAdapter(const std::string& dir, const ParameterStore& adapters,
                             const std::string& base_model) {
  CHECK(adapters.lora() != nullptr) << "SavePeftAdapter needs an adapter store";
  RETURN_IF_ERROR(WriteSafetensors(dir + "/" + kWeightsFile, adapters.NamedTensors(),
                                   {{"format", "pt"}}, DType::kF32));
  return WriteFileAtomically(dir + "/" + kConfigFile,
                             PeftAdapterConfigJson(*adapters.lora(), base_model));
}

namespace {

// `dir`/adapter_config.json as a JSON object.
absl::StatusOr<Json> ReadAdapterConfigObject(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path, kMaxAdapterConfigBytes));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  return j;
}

}  // namespace

absl::StatusOr<std::string> ReadPeftBaseModel(const std::string& dir) {
  const std::string path = dir + "/" + kConfigFile;
  ASSIGN_OR_RETURN(const Json j, ReadAdapterConfigObject(path));
  const Json base = j.value("base_model_name_or_path", Json());
  if (base.is_null()) return std::string();
  if (!base.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": base_model_name_or_path must be a string or null (got ", base.dump(), ")"));
  }
  return base.get<std::string>();
}

absl::StatusOr<LoraOptions> ReadPeftAdapterConfig(const std::string& dir) {
  const std::string path = dir + "/" + kConfigFile;
  ASSIGN_OR_RETURN(const Json j, ReadAdapterConfigObject(path));
  const Json peft_type = j.value("peft_type", Json());
  if (!peft_type.is_string() || peft_type.get<std::string>() != "LORA") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": peft_type must be \"LORA\" (got ", peft_type.dump(), ")"));
  }
  RETURN_IF_ERROR(ExpectPlain(j, path, "use_dora", false));
  RETURN_IF_ERROR(ExpectPlain(j, path, "bias", "none"));
  RETURN_IF_ERROR(ExpectPlain(j, path, "fan_in_fan_out", false));
  RETURN_IF_ERROR(ExpectPlain(j, path, "lora_bias", false));
  RETURN_IF_ERROR(ExpectPlain(j, path, "modules_to_save", nullptr));
  RETURN_IF_ERROR(ExpectPlain(j, path, "layers_to_transform", nullptr));
  RETURN_IF_ERROR(ExpectPlain(j, path, "rank_pattern", Json::object()));
  RETURN_IF_ERROR(ExpectPlain(j, path, "alpha_pattern", Json::object()));
  RETURN_IF_ERROR(ExpectPlain(j, path, "layer_replication", nullptr));
  RETURN_IF_ERROR(ExpectPlain(j, path, "exclude_modules", nullptr));
  RETURN_IF_ERROR(ExpectPlain(j, path, "target_parameters", nullptr));
  RETURN_IF_ERROR(ExpectPlain(j, path, "trainable_token_indices", nullptr));
  LoraOptions o;
  const Json r = j.value("r", Json());
  const Json alpha = j.value("lora_alpha", Json());
  if (!r.is_number_integer() || !alpha.is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": r must be an integer and lora_alpha a number (got ", r.dump(), ", ",
                     alpha.dump(), ")"));
  }
  o.r = r.get<int64_t>();
  o.alpha = alpha.get<double>();
  const Json rslora = j.value("use_rslora", Json(false));
  if (!rslora.is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": use_rslora must be true or false (got ", rslora.dump(), ")"));
  }
  o.rslora = rslora.get<bool>();
  const Json modules = j.value("target_modules", Json());
  if (!modules.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": target_modules must be a list of module names (got ", modules.dump(), ")"));
  }
  for (const Json& m : modules) {
    if (!m.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": target_modules lists ", m.dump(), ", not a module name"));
    }
    o.target_modules.push_back(m.get<std::string>());
  }
  // Canonical order, as job specs and stores use it.
  std::vector<std::string> ordered;
  for (const std::string& m : LoraModuleNames()) {
    if (o.targets(m)) ordered.push_back(m);
  }
  const absl::Status valid = ValidateLoraOptions(o);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", valid.message()));
  o.target_modules = ordered;
  return o;
}

absl::Status LoadPeftAdapter(const std::string& dir, ParameterStore& adapters) {
  CHECK(adapters.lora() != nullptr) << "LoadPeftAdapter needs an adapter store";
  ASSIGN_OR_RETURN(const LoraOptions stored, ReadPeftAdapterConfig(dir));
  const LoraOptions& want = *adapters.lora();
  if (stored.r != want.r || stored.target_modules != want.target_modules) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": the adapter has r = ", stored.r, " on [",
                                                   absl::StrJoin(stored.target_modules, ", "),
                                                   "], the job r = ", want.r, " on [",
                                                   absl::StrJoin(want.target_modules, ", "), "]"));
  }
  const std::string path = dir + "/" + kWeightsFile;
  ASSIGN_OR_RETURN(const SafetensorsFile file, SafetensorsFile::Open(path));
  CpuAllocator staging;
  for (auto& [name, target] : adapters.NamedTensors()) {
    if (!file.Contains(name)) {
      return absl::NotFoundError(absl::StrCat(path, ": no tensor '", name, "'"));
    }
    ASSIGN_OR_RETURN(Tensor t, file.ReadAsF32(name, staging));
    if (t.shape() != target.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", name, " is ",
                                                     ShapeString(t.shape()), ", expected ",
                                                     ShapeString(target.shape())));
    }
    std::memcpy(target.raw_data(), t.raw_data(), target.nbytes());
  }
  return absl::OkStatus();
}

}  // namespace sbp
