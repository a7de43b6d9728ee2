// What makes a checkpoint directory a model that transformers loads as it is,
// beside the weights and config.json: the base model's tokenizer files and
// its generation_config.json, copied when the base model has them (a
// generation_config.json with the model's BOS/EOS ids is written when it has
// none). LoRA checkpoints get the same files next to the adapter, so that
// `sbp generate --adapter` and PEFT find the tokenizer there too.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "worker/model/model_config.h"

namespace sbp {

// The file names copied from the base model when present.
inline constexpr const char* kCheckpointCompanionFiles[] = {"tokenizer.json",
                                                            "tokenizer_config.json",
                                                            "special_tokens_map.json",
                                                            "vocab.json",
                                                            "merges.txt",
                                                            "tokenizer.model",
                                                            "added_tokens.json",
                                                            "chat_template.jinja",
                                                            "generation_config.json"};

// Copies the companions of `base_model` (empty: none to copy) into `dir`.
absl::Status WriteCheckpointCompanions(const std::string& base_model, const ModelConfig& config,
                                       const std::string& dir);

}  // namespace sbp
