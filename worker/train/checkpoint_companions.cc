#include "worker/train/checkpoint_companions.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/model/file_util.h"

namespace sbp {
namespace {

// transformers' defaults for a model without a generation_config.json of
// its own: the special token ids of its config.json.
std::string GenerationConfigFromModel(const ModelConfig& config) {
  nlohmann::json j = {{"_from_model_config", true}};
  if (config.bos_token_id.has_value()) j["bos_token_id"] = *config.bos_token_id;
  if (config.eos_token_ids.size() == 1) {
    j["eos_token_id"] = config.eos_token_ids[0];
  } else if (!config.eos_token_ids.empty()) {
    j["eos_token_id"] = config.eos_token_ids;
  }
  return j.dump(2) + "\n";
}

}  // namespace

absl::Status WriteCheckpointCompanions(const std::string& base_model, const ModelConfig& config,
                                       const std::string& dir) {
  bool has_generation_config = false;
  if (!base_model.empty()) {
    for (const char* name : kCheckpointCompanionFiles) {
      absl::StatusOr<std::string> contents = ReadFileToString(absl::StrCat(base_model, "/", name));
      if (absl::IsNotFound(contents.status())) continue;
      if (!contents.ok()) {
        return absl::Status(contents.status().code(),
                            absl::StrCat("copying the base model's ", name,
                                         " into the checkpoint: ", contents.status().message()));
      }
      RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(dir, "/", name), *contents));
      has_generation_config |= std::string(name) == "generation_config.json";
    }
  }
  if (has_generation_config) return absl::OkStatus();
  return WriteFileAtomically(dir + "/generation_config.json", GenerationConfigFromModel(config));
}

}  // namespace sbp
