#include "worker/train/checkpoint_offload.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/file_confinement.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/engine/planner.h"
#include "worker/train/job_plan.h"

namespace sbp {

absl::StatusOr<CheckpointTier> ChooseCheckpointTier(const JobSpec& spec, const ModelConfig& config,
                                                    int64_t device_budget_bytes,
                                                    const OffloadResources& resources) {
  if (spec.streambp.offload.checkpoints.has_value()) return *spec.streambp.offload.checkpoints;
  if (device_budget_bytes <= 0) return CheckpointTier::kDevice;
  PlanRequest request = PlanRequestForSpec(spec, config);
  ASSIGN_OR_RETURN(
      const MemoryPlan plan,
      PlanTiers(request, device_budget_bytes, DefaultSafetyMargin(spec.resources.device),
                resources.host_memory_bytes, resources.disk_bytes));
  if (plan.checkpoint_tier != CheckpointTier::kDevice) {
    LOG(INFO) << spec.name << ": layer checkpoints in the "
              << CheckpointTierName(plan.checkpoint_tier)
              << " tier (the device tier needs more than " << device_budget_bytes << " bytes)";
  }
  return plan.checkpoint_tier;
}

absl::StatusOr<std::string> OffloadDirectory(const JobSpec& spec, const std::string& base_dir,
                                             const std::string& run_dir) {
  const std::string& given = spec.streambp.offload.disk_dir;
  const std::string dir =
      given.empty() ? absl::StrCat(run_dir, "/offload") : ResolveJobPath(base_dir, given);
  const absl::Status confined = CheckConfinedPath(dir, FileAccess::kWrite);
  if (!confined.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("streambp.offload.disk_dir: ", confined.message()));
  }
  if (given.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("creating ", dir, ": ", ec.message()));
    }
  }
  RETURN_IF_ERROR(CheckDiskDirectory(dir));
  return dir;
}

absl::StatusOr<std::unique_ptr<CheckpointStore>> OpenCheckpointStore(
    CheckpointTier tier, const JobSpec& spec, Backend& backend, const std::string& base_dir,
    const std::string& run_dir, const OffloadResources& resources) {
  switch (tier) {
    case CheckpointTier::kDevice:
      return std::unique_ptr<CheckpointStore>();
    case CheckpointTier::kHost:
      return NewHostCheckpointStore(backend);
    case CheckpointTier::kDisk: {
      ASSIGN_OR_RETURN(const std::string dir, OffloadDirectory(spec, base_dir, run_dir));
      return NewDiskCheckpointStore(backend, dir, resources.disk_bytes);
    }
  }
  return absl::InternalError("unknown checkpoint tier");
}

}  // namespace sbp
