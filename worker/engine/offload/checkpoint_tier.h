// Where the layer inputs a backward pass keeps (its checkpoints) live:
//   device  on the device, L + 1 tensors of [T, H] (no copies);
//   host    in host memory (pinned on CUDA), with two [T, H] slots on the
//           device that the forward writes into and the backward reads from;
//   disk    in one file on local disk, with the same two device slots (and, on
//           CUDA, two pinned host staging buffers between them and the file).
// A job asks for one, or for `auto` (the planner takes the fastest that fits).
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sbp {

enum class CheckpointTier { kDevice, kHost, kDisk };

absl::string_view CheckpointTierName(CheckpointTier tier);  // "device", "host", "disk"
// "device", "host" or "disk"; an error naming the three otherwise.
absl::StatusOr<CheckpointTier> ParseCheckpointTier(absl::string_view text);

}  // namespace sbp
