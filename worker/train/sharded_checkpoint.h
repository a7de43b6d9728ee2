// Checkpoints of a ZeRO-2 run: the directory layout of checkpoint.h, except
// that the optimizer state is one file per rank, in trainer_state/,
//   optimizer-rank-00001-of-00004.safetensors  "exp_avg.<group>", "exp_avg_sq.<group>"
//                                              (+ "master.<group>", see checkpoint.h)
// holding that rank's shard of every parameter group. Rank 0 prepares the
// staging directory, every rank writes its shard, rank 0 writes the weights
// (the compute copy, identical on every rank after the step's all-gather)
// and the trainer state and commits; all-reduces order the phases and give
// every rank rank 0's outcome, so every rank returns the same verdict.
// Under ZeRO-3 (Zero2State::sharded_weights) the weights are first gathered
// group by group into rank 0's host memory, with every rank taking part.
// Shards on a GPU pass through host memory on their way to and from disk.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "worker/dist/zero2_state.h"
#include "worker/engine/parameter_store.h"
#include "worker/train/checkpoint.h"

namespace sbp {

std::string OptimizerShardFileName(int rank, int world_size);

// Called by every rank with the same `state`.
absl::Status SaveShardedCheckpoint(const CheckpointSink& sink, const ParameterStore& weights,
                                   Zero2State& zero, const TrainerState& state, int64_t keep_last);

// Every rank loads the weights, the trainer state and its own optimizer
// shard (and master shard), then rebuilds the compute copy from the masters
// (a collective). FailedPrecondition when the checkpoint was written by a different
// number of ranks (or by a single worker).
absl::StatusOr<TrainerState> LoadShardedCheckpoint(const std::string& checkpoint_dir,
                                                   ParameterStore& weights, Zero2State& zero);

}  // namespace sbp
