// What lives where in one checkpoint directory, <run>/checkpoints/step-N/.
// The directory itself is a Hugging Face model that from_pretrained loads as
// it is (weights or a PEFT adapter, config.json, tokenizer files,
// generation_config.json); what only a resume needs lives in a subfolder
// that model loaders never look into:
//   trainer_state/trainer_state.json             step, data cursor, job, figures
//   trainer_state/optimizer.safetensors          AdamW moments (+ fp32 masters)
//   trainer_state/optimizer-rank-R-of-N.safetensors  a ZeRO run's shards
// Checkpoints written before this layout hold those files beside the
// weights; every reader accepts both.
#pragma once

#include <string>

namespace sbp {

// The subfolder's name, and the file whose presence makes a checkpoint
// complete.
inline constexpr char kTrainerStateDir[] = "trainer_state";
inline constexpr char kTrainerStateFile[] = "trainer_state.json";

// "<checkpoint_dir>/trainer_state": where writers put the state files.
std::string TrainerStateDir(const std::string& checkpoint_dir);

// Where readers find them: the subfolder when it holds trainer_state.json,
// else the checkpoint directory itself (the older layout).
std::string FindTrainerStateDir(const std::string& checkpoint_dir);

// True when `dir` is a complete checkpoint: trainer_state.json in either
// layout.
bool IsCompleteCheckpoint(const std::string& dir);

}  // namespace sbp
