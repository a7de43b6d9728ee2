#include "worker/train/sharded_checkpoint.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/safetensors.h"

namespace sbp {
namespace {

// Runs `phase` on rank 0 only and gives every rank its outcome.
absl::Status OnRankZero(Communicator& comm, const std::function<absl::Status()>& phase) {
  absl::Status status = comm.rank() == 0 ? phase() : absl::OkStatus();
  char failed = status.ok() ? 0 : 1;
  RETURN_IF_ERROR(comm.Broadcast(&failed, 1, 0));
  if (comm.rank() == 0) return status;
  if (failed) return absl::InternalError("rank 0 failed to write the checkpoint (see its log)");
  return absl::OkStatus();
}

}  // namespace

std::string OptimizerShardFileName(int rank, int world_size) {
  char name[64];
  std::snprintf(name, sizeof(name), "optimizer-rank-%05d-of-%05d.safetensors", rank, world_size);
  return name;
}

absl::Status SaveShardedCheckpoint(const std::string& run_dir, const ParameterStore& weights,
                                   Zero2State& zero, const TrainerState& state, int64_t keep_last) {
  Communicator& comm = zero.communicator();
  const std::string staging = CheckpointStagingPath(run_dir, state.step);
  RETURN_IF_ERROR(OnRankZero(comm, [&] { return PrepareCheckpointStaging(run_dir, state.step); }));

  NamedTensors shards;
  const auto& groups = weights.groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    shards.emplace_back("exp_avg." + groups[g].name, zero.exp_avg_shards()[g]);
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    shards.emplace_back("exp_avg_sq." + groups[g].name, zero.exp_avg_sq_shards()[g]);
  }
  const absl::Status written = WriteSafetensors(
      staging + "/" + OptimizerShardFileName(comm.rank(), comm.world_size()), shards,
      {{"format", "sbp-zero2-adamw"},
       {"rank", std::to_string(comm.rank())},
       {"world_size", std::to_string(comm.world_size())}},
      DType::kF32);
  // Every rank learns whether all shards were written.
  double failures = written.ok() ? 0 : 1;
  RETURN_IF_ERROR(comm.AllReduce(&failures, 1, ReduceOp::kSum));
  RETURN_IF_ERROR(written);
  if (failures > 0) {
    return absl::InternalError(
        absl::StrCat(failures, " rank(s) failed to write their optimizer shard"));
  }
  return OnRankZero(comm, [&]() -> absl::Status {
    RETURN_IF_ERROR(WriteCheckpointModelAndState(staging, weights, state));
    return CommitCheckpoint(run_dir, state.step, keep_last);
  });
}

absl::StatusOr<TrainerState> LoadShardedCheckpoint(const std::string& checkpoint_dir,
                                                   ParameterStore& weights, Zero2State& zero) {
  Communicator& comm = zero.communicator();
  const std::string path =
      checkpoint_dir + "/" + OptimizerShardFileName(comm.rank(), comm.world_size());
  if (!std::filesystem::exists(path)) {
    return absl::FailedPreconditionError(absl::StrCat(
        checkpoint_dir, " has no optimizer shard for rank ", comm.rank(), " of ", comm.world_size(),
        " (was it written with a different resources.world_size?)"));
  }
  ASSIGN_OR_RETURN(TrainerState state, LoadCheckpointWeightsAndState(checkpoint_dir, weights));
  ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  CpuAllocator staging;
  const auto& groups = weights.groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (auto [prefix, target] : {std::pair{"exp_avg.", &zero.exp_avg_shards()[g]},
                                  std::pair{"exp_avg_sq.", &zero.exp_avg_sq_shards()[g]}}) {
      const std::string name = prefix + groups[g].name;
      ASSIGN_OR_RETURN(Tensor t, file.ReadAsF32(name, staging));
      if (t.numel() != target->numel()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": ", name, " has ", t.numel(),
                                                       " elements, expected ", target->numel()));
      }
      std::memcpy(target->raw_data(), t.raw_data(), target->nbytes());
    }
  }
  return state;
}

}  // namespace sbp
