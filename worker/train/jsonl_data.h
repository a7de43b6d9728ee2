// JSONL token data for the three objectives (DESIGN.md §5). One JSON object
// per line; blank lines are skipped; other fields on a line are ignored.
//   SFT   {"input_ids": [...], "labels": [...]}   labels optional (= input_ids),
//                                                 -100 marks positions without loss
//         {"prompt_ids": [...], "completion_ids": [...]}   the prompt is masked
//   DPO   {"prompt_ids": [...], "chosen_ids": [...], "rejected_ids": [...]}
//   GRPO  {"prompt_ids": [...], "completions": [{"ids": [...], "reward": 1.0,
//                                                "old_logprobs": [...]}, ...]}
//         old_logprobs is optional: one log-probability per id, from the
//         policy that sampled the completion (absent: on-policy).
//   GRPO online (grpo.rollout): {"prompt_ids": [...], ...}; the other fields
//         (a reference "answer", tests, ...) are kept for the reward.
// Every error is InvalidArgument (NotFound for a missing file) and names the
// file, the line and the field ("data.jsonl:17: field 'chosen_ids' must be an
// array of integers, got string"); nothing is returned unless the whole file
// is valid. The file must be a regular file (never a FIFO or a device); each
// line has at most kMaxJsonlLineBytes and is nested at most
// kMaxInputNestingDepth levels deep (both checked before it is parsed). DPO and GRPO responses must
// not be empty; an SFT line may have no token with a loss, but an SFT file must have at least one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "worker/engine/batch.h"
#include "worker/train/job_spec.h"

namespace sbp {

// Longest JSONL line read: a GRPO group of 16 completions of 64k tokens each,
// with old_logprobs, is ~32 MiB of text.
inline constexpr int64_t kMaxJsonlLineBytes = int64_t{64} << 20;
// Largest log-probability accepted in old_logprobs (rounding can push a
// probability-1 token a hair above 0).
inline constexpr double kMaxOldLogprob = 1e-4;

struct DataOptions {
  int64_t vocab_size = 0;                       // every id must be in [0, vocab_size)
  int64_t seq_len = 0;                          // longest sequence (prompt + response); 0: no limit
  Truncation truncation = Truncation::kReject;  // for sequences longer than seq_len
};

// Prompt + response sequences of one preference pair; the prompt's labels
// are kIgnoreIndex. Both share the same prompt.
struct DpoPair {
  TokenSequence chosen;
  TokenSequence rejected;
};

struct GrpoCompletion {
  std::vector<int32_t> ids;
  double reward = 0;
  std::vector<float> old_logprobs;  // empty, or one per id
};

struct GrpoGroup {
  std::vector<int32_t> prompt;
  std::vector<GrpoCompletion> completions;  // at least one
};

// A prompt of online GRPO and the rest of its line (what rewards compare
// against).
struct RolloutPrompt {
  std::vector<int32_t> prompt;
  nlohmann::json fields = nlohmann::json::object();
};

// Prompt + response with the prompt's labels kIgnoreIndex, held to
// options.seq_len (reject, or keep the prompt and cut the response; a prompt
// that leaves no room is an error either way). `what` names the response
// field in messages.
absl::StatusOr<TokenSequence> PromptResponseSequence(const std::vector<int32_t>& prompt,
                                                     const std::vector<int32_t>& response,
                                                     absl::string_view what,
                                                     const DataOptions& options,
                                                     absl::string_view where);

// Prompt + completion `index` of `group` as a sequence with the prompt masked.
TokenSequence GrpoSequence(const GrpoGroup& group, size_t index);

// Parses one line; `where` ("file:line") prefixes messages.
absl::StatusOr<TokenSequence> ParseSftLine(absl::string_view line, const DataOptions& options,
                                           absl::string_view where);
absl::StatusOr<DpoPair> ParseDpoLine(absl::string_view line, const DataOptions& options,
                                     absl::string_view where);
absl::StatusOr<GrpoGroup> ParseGrpoLine(absl::string_view line, const DataOptions& options,
                                        absl::string_view where);

// A prompt line: prompt_ids must leave `max_new_tokens` within
// options.seq_len (refused otherwise, naming the line: a completion is
// never cut short by a prompt that is too long).
absl::StatusOr<RolloutPrompt> ParsePromptLine(absl::string_view line, const DataOptions& options,
                                              int64_t max_new_tokens, absl::string_view where);

// Reads every line of `path`.
absl::StatusOr<std::vector<TokenSequence>> LoadSftJsonl(const std::string& path,
                                                        const DataOptions& options);
absl::StatusOr<std::vector<DpoPair>> LoadDpoJsonl(const std::string& path,
                                                  const DataOptions& options);
absl::StatusOr<std::vector<GrpoGroup>> LoadGrpoJsonl(const std::string& path,
                                                     const DataOptions& options);
absl::StatusOr<std::vector<RolloutPrompt>> LoadPromptJsonl(const std::string& path,
                                                           const DataOptions& options,
                                                           int64_t max_new_tokens);

// SFT without a length limit (the `sbp grad` tool).
absl::StatusOr<TokenSequence> ParseSftLine(absl::string_view line, int64_t vocab_size,
                                           absl::string_view where);
absl::StatusOr<std::vector<TokenSequence>> LoadSftJsonl(const std::string& path,
                                                        int64_t vocab_size);

}  // namespace sbp
