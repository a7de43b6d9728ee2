// Training checkpoints. A checkpoint is a directory
//   <run>/checkpoints/step-00000050/
//     config.json + model.safetensors   the weights, loadable as a model, in
//                                       the model's own dtype (torch_dtype);
//                                       a PEFT adapter in LoRA runs
//     tokenizer files, generation_config.json  (checkpoint_companions.h)
//     trainer_state/                    what only a resume reads
//                                       (checkpoint_layout.h):
//       optimizer.safetensors           "exp_avg.<name>", "exp_avg_sq.<name>",
//                                       and "master.<name>", the fp32 master
//                                       weights, whenever the model file
//                                       cannot hold them exactly (bf16 files,
//                                       or a run with a bf16 compute copy)
//       trainer_state.json              step, data cursor, job name, figures
// built in a staging directory of the writing attempt
// (.tmp-step-00000050-attempt-3), every file fsynced, the run's fence
// checked, then renamed into place; <run>/checkpoints/latest, a link to the
// newest one (latest_link.h), is replaced atomically after the rename. A
// crash at any point leaves either the previous checkpoint or the new one,
// never half of one; a failed write removes its staging directory.
// Checkpoints of the older layout (state beside the weights, `latest` a
// text file) still load.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "worker/engine/parameter_store.h"

namespace sbp {

struct TrainerState {
  int64_t step = 0;         // optimizer steps completed
  int64_t attempt = 0;      // the attempt that wrote the checkpoint (0: a local run)
  std::string data_cursor;  // DataCursor::ToJson()
  std::string job_name;
  double last_loss = 0;
  int64_t tokens_seen = 0;
  nlohmann::json ToJson() const;
  static absl::StatusOr<TrainerState> FromJson(const nlohmann::json& json,
                                               const std::string& source);
};

// "<run_dir>/checkpoints/step-%08d".
std::string CheckpointPath(const std::string& run_dir, int64_t step);

// Where checkpoints go and who writes them: the run directory, the writing
// attempt, and the fence checked right before a commit (empty: none).
struct CheckpointSink {
  std::string run_dir;
  int64_t attempt = 0;
  std::function<absl::Status()> fence;
  // The model directory the run loaded: adapter_config.json's
  // base_model_name_or_path in LoRA checkpoints (null when empty).
  std::string base_model;
};

// The dtype model.safetensors is written in: the model's own torch_dtype
// (bf16 for "bfloat16"; f32 otherwise — the runtime holds no f16, so an f16
// model's checkpoints are written in f32, which transformers casts on load).
DType CheckpointWeightDType(const ModelConfig& config);

// True when a checkpoint of `config`'s model must carry fp32 master weights
// beside the model file, given whether the run keeps separate masters.
bool CheckpointNeedsMasters(const ModelConfig& config, bool separate_master);

// Writes a checkpoint atomically and points `latest` at it; then removes all
// but the newest `keep_last` checkpoints (0 keeps all). Every store is host
// f32: `weights` go to the model file, `master` (null: the weights are the
// masters) to the optimizer file when CheckpointNeedsMasters says so.
absl::Status SaveCheckpoint(const CheckpointSink& sink, const ParameterStore& weights,
                            const ParameterStore* master, const ParameterStore& exp_avg,
                            const ParameterStore& exp_avg_sq, const TrainerState& state,
                            int64_t keep_last);

// The pieces of SaveCheckpoint, for writers that add their own files (under
// ZeRO-2 each rank writes its optimizer shard into TrainerStateDir of the
// staging directory): an empty staging directory (with that subfolder),
// the model and trainer state in it, then the commit (fsync, rename into
// place, `latest`, pruning to `keep_last`).
std::string CheckpointStagingPath(const CheckpointSink& sink, int64_t step);
absl::Status PrepareCheckpointStaging(const CheckpointSink& sink, int64_t step);
absl::Status WriteCheckpointModelAndState(const CheckpointSink& sink,
                                          const std::string& staging_dir,
                                          const ParameterStore& weights, const TrainerState& state);
absl::Status CommitCheckpoint(const CheckpointSink& sink, int64_t step, int64_t keep_last);
// `status` after removing the staging directory of `step` when it is an
// error (a failed write leaves nothing behind).
absl::Status DropStagingOnError(absl::Status status, const CheckpointSink& sink, int64_t step);

// Removes the staging directories of attempts older than `attempt` (they are
// fenced out and can no longer commit).
void RemoveStaleStaging(const std::string& run_dir, int64_t attempt);

// The newest complete checkpoint directory of the run, if any.
absl::StatusOr<std::optional<std::string>> FindLatestCheckpoint(const std::string& run_dir);

// Loads a checkpoint's weights and trainer state (not the optimizer), in
// either layout.
absl::StatusOr<TrainerState> LoadCheckpointWeightsAndState(const std::string& checkpoint_dir,
                                                           ParameterStore& weights);

// Loads a checkpoint into host f32 stores of the run's model layout;
// `weights` receive the full-precision values: the fp32 masters when the
// checkpoint has them, else the model file's weights.
absl::StatusOr<TrainerState> LoadCheckpoint(const std::string& checkpoint_dir,
                                            ParameterStore& weights, ParameterStore& exp_avg,
                                            ParameterStore& exp_avg_sq);

// The prefix of master weights in optimizer files ("master.").
inline constexpr char kMasterPrefix[] = "master.";

}  // namespace sbp
