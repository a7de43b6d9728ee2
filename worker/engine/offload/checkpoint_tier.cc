#include "worker/engine/offload/checkpoint_tier.h"

#include "absl/strings/str_cat.h"

namespace sbp {

absl::string_view CheckpointTierName(CheckpointTier tier) {
  switch (tier) {
    case CheckpointTier::kDevice:
      return "device";
    case CheckpointTier::kHost:
      return "host";
    case CheckpointTier::kDisk:
      return "disk";
  }
  return "?";
}

absl::StatusOr<CheckpointTier> ParseCheckpointTier(absl::string_view text) {
  if (text == "device") return CheckpointTier::kDevice;
  if (text == "host") return CheckpointTier::kHost;
  if (text == "disk") return CheckpointTier::kDisk;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown checkpoint tier '", text, "' (expected device, host or disk)"));
}

}  // namespace sbp
