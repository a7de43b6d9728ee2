// Where a training job keeps its layer checkpoints (streambp.offload): the
// tier the spec names or, for `auto`, the fastest one the memory planner fits
// in the worker's device budget, host memory and disk allowance; and the
// store that holds them off the device (worker/engine/offload).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/engine/offload/checkpoint_store.h"
#include "worker/model/model_config.h"
#include "worker/train/job_spec.h"

namespace sbp {

// What a worker offers a job beyond its device: host memory for offloaded
// state (0: unlimited) and the share of its local disk the disk tier may
// fill (0: none for `auto`; an explicit `disk` tier is then bounded by the
// disk's free space alone).
struct OffloadResources {
  int64_t host_memory_bytes = 0;
  int64_t disk_bytes = 0;
};

// The spec's tier, or for `auto`: device when the worker has no budget (its
// memory is not known) or the step fits it; else the fastest tier PlanTiers
// fits, or the planner's error naming what is short.
absl::StatusOr<CheckpointTier> ChooseCheckpointTier(const JobSpec& spec, const ModelConfig& config,
                                                    int64_t device_budget_bytes,
                                                    const OffloadResources& resources);

// The disk tier's directory: streambp.offload.disk_dir resolved in
// `base_dir`, else <run_dir>/offload (created); checked against the run's
// write confinement, then that it is a writable directory (InvalidArgument
// naming streambp.offload.disk_dir otherwise).
absl::StatusOr<std::string> OffloadDirectory(const JobSpec& spec, const std::string& base_dir,
                                             const std::string& run_dir);

// The store of `tier` on `backend` (null for the device tier).
absl::StatusOr<std::unique_ptr<CheckpointStore>> OpenCheckpointStore(
    CheckpointTier tier, const JobSpec& spec, Backend& backend, const std::string& base_dir,
    const std::string& run_dir, const OffloadResources& resources);

}  // namespace sbp
