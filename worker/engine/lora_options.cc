#include "worker/engine/lora_options.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sbp {

absl::Status ValidateLoraOptions(const LoraOptions& o) {
  if (o.r < 1)
    return absl::InvalidArgumentError(absl::StrCat("lora.r: must be at least 1 (got ", o.r, ")"));
  if (!(o.alpha > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("lora.alpha: must be a positive number (got ", o.alpha, ")"));
  }
  if (o.dropout != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lora.dropout: only 0 is supported, so that gradients stay exact (got ", o.dropout, ")"));
  }
  if (o.target_modules.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("lora.target_modules: name at least one of ",
                                                   absl::StrJoin(LoraModuleNames(), ", ")));
  }
  std::vector<std::string> unknown;
  for (const std::string& m : o.target_modules) {
    bool known = false;
    for (const std::string& k : LoraModuleNames()) known = known || k == m;
    if (!known) unknown.push_back(m);
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lora.target_modules: unknown module", unknown.size() > 1 ? "s " : " ",
        absl::StrJoin(unknown, ", "), " (expected ", absl::StrJoin(LoraModuleNames(), ", "), ")"));
  }
  return absl::OkStatus();
}

}  // namespace sbp
