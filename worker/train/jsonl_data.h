// JSONL token data. One JSON object per line; blank lines are skipped.
// Supervised fine-tuning lines are either
//   {"input_ids": [...], "labels": [...]}      labels optional (= input_ids),
//                                              -100 marks positions without loss
//   {"prompt_ids": [...], "completion_ids": [...]}   the prompt is masked
// Every error names the file, the line and the field; nothing is returned
// unless the whole file is valid.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/engine/batch.h"

namespace sbp {

// Parses one SFT line (`where` is "file:line" for messages).
absl::StatusOr<TokenSequence> ParseSftLine(absl::string_view line, int64_t vocab_size,
                                           absl::string_view where);

// Reads every line of `path`.
absl::StatusOr<std::vector<TokenSequence>> LoadSftJsonl(const std::string& path,
                                                        int64_t vocab_size);

}  // namespace sbp
