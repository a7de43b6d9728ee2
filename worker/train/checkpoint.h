// Training checkpoints. A checkpoint is a directory
//   <run>/checkpoints/step-00000050/
//     config.json + model.safetensors   the weights, loadable as a model
//     optimizer.safetensors             "exp_avg.<name>", "exp_avg_sq.<name>"
//     trainer_state.json                step, data cursor, job name, figures
// built under a temporary name, every file fsynced, then renamed into place;
// <run>/checkpoints/latest names the newest one and is replaced atomically
// after the rename. A crash at any point leaves either the previous
// checkpoint or the new one, never half of one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "worker/engine/parameter_store.h"

namespace sbp {

struct TrainerState {
  int64_t step = 0;           // optimizer steps completed
  std::string data_cursor;    // DataCursor::ToJson()
  std::string job_name;
  double last_loss = 0;
  int64_t tokens_seen = 0;
  nlohmann::json ToJson() const;
  static absl::StatusOr<TrainerState> FromJson(const nlohmann::json& json,
                                               const std::string& source);
};

// "<run_dir>/checkpoints/step-%08d".
std::string CheckpointPath(const std::string& run_dir, int64_t step);

// Writes a checkpoint atomically and points `latest` at it; then removes all
// but the newest `keep_last` checkpoints (0 keeps all).
absl::Status SaveCheckpoint(const std::string& run_dir, const ParameterStore& weights,
                            const ParameterStore& exp_avg, const ParameterStore& exp_avg_sq,
                            const TrainerState& state, int64_t keep_last);

// The pieces of SaveCheckpoint, for writers that add their own files (under
// ZeRO-2 each rank writes its optimizer shard): an empty staging directory,
// the model and trainer state in it, then the commit (fsync, rename into
// place, `latest`, pruning to `keep_last`).
std::string CheckpointStagingPath(const std::string& run_dir, int64_t step);
absl::Status PrepareCheckpointStaging(const std::string& run_dir, int64_t step);
absl::Status WriteCheckpointModelAndState(const std::string& staging_dir,
                                          const ParameterStore& weights,
                                          const TrainerState& state);
absl::Status CommitCheckpoint(const std::string& run_dir, int64_t step, int64_t keep_last);

// The newest complete checkpoint directory of the run, if any.
absl::StatusOr<std::optional<std::string>> FindLatestCheckpoint(const std::string& run_dir);

// Loads a checkpoint's weights and trainer state (not the optimizer).
absl::StatusOr<TrainerState> LoadCheckpointWeightsAndState(const std::string& checkpoint_dir,
                                                           ParameterStore& weights);

// Loads a checkpoint into stores of the run's model layout.
absl::StatusOr<TrainerState> LoadCheckpoint(const std::string& checkpoint_dir,
                                            ParameterStore& weights, ParameterStore& exp_avg,
                                            ParameterStore& exp_avg_sq);

}  // namespace sbp
