#include "worker/train/sharded_checkpoint.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/allocator.h"
#include "worker/engine/device_store.h"
#include "worker/model/safetensors.h"
#include "worker/train/checkpoint_layout.h"

namespace sbp {
namespace {

// Runs `phase` on rank 0 only and gives every rank its outcome (an
// all-reduce of host values: every communicator takes those).
absl::Status OnRankZero(Communicator& comm, const std::function<absl::Status()>& phase) {
  absl::Status status = comm.rank() == 0 ? phase() : absl::OkStatus();
  double failed = status.ok() ? 0 : 1;
  RETURN_IF_ERROR(comm.AllReduce(&failed, 1, ReduceOp::kMax));
  if (comm.rank() == 0) return status;
  if (failed > 0) return absl::InternalError("rank 0 failed to write the checkpoint (see its log)");
  return absl::OkStatus();
}

// A host f32 copy of a shard (the shard itself when it already is one).
absl::StatusOr<Tensor> HostShard(const Tensor& shard, Backend& backend, Allocator& host) {
  if (shard.device().is_cpu()) return shard;
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(host, shard.shape(), DType::kF32, "checkpoint shard"));
  backend.Copy(shard, out);
  return out;
}

}  // namespace

std::string OptimizerShardFileName(int rank, int world_size) {
  char name[64];
  std::snprintf(name, sizeof(name), "optimizer-rank-%05d-of-%05d.safetensors", rank, world_size);
  return name;
}

absl::Status SaveShardedCheckpoint(const CheckpointSink& sink, const ParameterStore& weights,
                                   Zero2State& zero, const TrainerState& state, int64_t keep_last) {
  Communicator& comm = zero.communicator();
  Backend& backend = zero.backend();
  CpuAllocator host;
  // ZeRO-3: rank 0 writes weights no rank holds whole; every rank takes part
  // in gathering them, group by group, into rank 0's host copy.
  std::optional<ParameterStore> gathered;
  if (ShardedWeights* sharded = zero.sharded_weights()) {
    RETURN_IF_ERROR(OnRankZero(comm, [&]() -> absl::Status {
      ASSIGN_OR_RETURN(gathered, HostStoreLike(weights, host, "checkpoint weights"));
      return absl::OkStatus();
    }));
    for (size_t g = 0; g < weights.groups().size(); ++g) {
      RETURN_IF_ERROR(sharded->GatherToHost(static_cast<int>(g),
                                            gathered ? gathered->groups()[g].flat : Tensor()));
    }
  }
  const std::string staging = CheckpointStagingPath(sink, state.step);
  RETURN_IF_ERROR(OnRankZero(comm, [&] { return PrepareCheckpointStaging(sink, state.step); }));

  const bool masters = CheckpointNeedsMasters(weights.config(), zero.separate_master());
  NamedTensors shards;
  const auto& groups = weights.groups();
  for (auto [prefix, list] : {std::pair{"exp_avg.", &zero.exp_avg_shards()},
                              std::pair{"exp_avg_sq.", &zero.exp_avg_sq_shards()}}) {
    for (size_t g = 0; g < groups.size(); ++g) {
      ASSIGN_OR_RETURN(Tensor t, HostShard((*list)[g], backend, host));
      shards.emplace_back(prefix + groups[g].name, std::move(t));
    }
  }
  if (masters) {
    for (size_t g = 0; g < groups.size(); ++g) {
      ASSIGN_OR_RETURN(Tensor t, HostShard(zero.master_shard(static_cast<int>(g)), backend, host));
      shards.emplace_back(kMasterPrefix + groups[g].name, std::move(t));
    }
  }
  const absl::Status written = WriteSafetensors(
      TrainerStateDir(staging) + "/" + OptimizerShardFileName(comm.rank(), comm.world_size()),
      shards,
      {{"format", "sbp-zero2-adamw"},
       {"rank", std::to_string(comm.rank())},
       {"world_size", std::to_string(comm.world_size())}},
      DType::kF32);
  shards.clear();
  // Every rank learns whether all shards were written.
  double failures = written.ok() ? 0 : 1;
  RETURN_IF_ERROR(comm.AllReduce(&failures, 1, ReduceOp::kSum));
  if (!written.ok() && comm.rank() == 0) {
    return DropStagingOnError(written, sink, state.step);
  }
  RETURN_IF_ERROR(written);
  if (failures > 0) {
    if (comm.rank() == 0)
      DropStagingOnError(absl::AbortedError(""), sink, state.step).IgnoreError();
    return absl::InternalError(
        absl::StrCat(failures, " rank(s) failed to write their optimizer shard"));
  }
  return OnRankZero(comm, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(const ParameterStore host_weights,
                     gathered.has_value()
                         ? absl::StatusOr<ParameterStore>(*std::move(gathered))
                         : HostCopyOfStore(weights, backend, host, "checkpoint weights"));
    return DropStagingOnError(
        [&]() -> absl::Status {
          RETURN_IF_ERROR(WriteCheckpointModelAndState(sink, staging, host_weights, state));
          return CommitCheckpoint(sink, state.step, keep_last);
        }(),
        sink, state.step);
  });
}

absl::StatusOr<TrainerState> LoadShardedCheckpoint(const std::string& checkpoint_dir,
                                                   ParameterStore& weights, Zero2State& zero) {
  Communicator& comm = zero.communicator();
  Backend& backend = zero.backend();
  const std::string path = FindTrainerStateDir(checkpoint_dir) + "/" +
                           OptimizerShardFileName(comm.rank(), comm.world_size());
  if (!std::filesystem::exists(path)) {
    return absl::FailedPreconditionError(absl::StrCat(
        checkpoint_dir, " has no optimizer shard for rank ", comm.rank(), " of ", comm.world_size(),
        " (was it written with a different resources.world_size?)"));
  }
  CpuAllocator staging;
  ASSIGN_OR_RETURN(ParameterStore host_weights,
                   HostStoreLike(weights, staging, "checkpoint weights"));
  ASSIGN_OR_RETURN(TrainerState state, LoadCheckpointWeightsAndState(checkpoint_dir, host_weights));
  ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  const auto& groups = weights.groups();
  const bool has_masters = !groups.empty() && file.Contains(kMasterPrefix + groups[0].name);
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t shard = zero.shard_elements(static_cast<int>(g));
    Tensor master = zero.master_shard(static_cast<int>(g));
    std::vector<std::pair<std::string, Tensor*>> targets = {
        {"exp_avg." + groups[g].name, &zero.exp_avg_shards()[g]},
        {"exp_avg_sq." + groups[g].name, &zero.exp_avg_sq_shards()[g]}};
    if (has_masters) targets.emplace_back(kMasterPrefix + groups[g].name, &master);
    for (auto& [name, target] : targets) {
      ASSIGN_OR_RETURN(Tensor t, file.ReadAsF32(name, staging));
      if (t.numel() != target->numel()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": ", name, " has ", t.numel(),
                                                       " elements, expected ", target->numel()));
      }
      backend.Copy(t, *target);
    }
    if (!has_masters) {
      // The model file holds the masters exactly (f32): this rank's rows.
      const int64_t begin = comm.rank() * shard;
      backend.Copy(host_weights.groups()[g].flat.Rows(begin, begin + shard), master);
    }
  }
  backend.Synchronize();  // the staged host tensors are released on return
  RETURN_IF_ERROR(zero.RefreshComputeWeights());
  return state;
}

}  // namespace sbp
