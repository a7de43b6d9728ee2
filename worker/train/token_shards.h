// Token shards: a dataset of token ids in one binary file, memory-mapped by
// the worker so that its memory does not grow with the dataset. `sbp data
// prepare --shards` (tools/data_prepare/token_shards.py) and
// WriteTokenShards below write it; README.md "Token shards" documents it.
//
// Format version 1, little-endian:
//   header, 64 bytes
//      0  char[8]  magic "SBPSHARD"
//      8  u32      version (1)
//     12  u32      objective: 0 sft, 1 dpo, 2 grpo
//     16  u32      bytes per token id: 2 (uint16) or 4 (uint32)
//     20  u32      flags: bit 0 = a logprobs section follows the tokens
//     24  u64      examples           32  u64  spans          40  u64  tokens
//     48  u64[2]   zero
//   then each section at a multiple of 8 bytes (zero padding between):
//     tokens         u16/u32 [tokens]
//     logprobs       f32 [tokens]           (flag bit 0 only)
//     example_spans  u64 [examples + 1]     example i = spans [e[i], e[i+1])
//     span_tokens    u64 [spans + 1]        span j = tokens [s[j], s[j+1])
//     span_rewards   f64 [spans]            GRPO rewards, 0 elsewhere
//     span_kinds     u8  [spans]            TokenSpanKind
//   and the file ends right after span_kinds.
// An example is a run of non-empty spans: SFT either kPrompt/kTarget spans in
// any order (labels = the ids of kTarget spans, -100 elsewhere: the
// {"input_ids", "labels"} form) or exactly [kPrompt, kCompletion] (the
// {"prompt_ids", "completion_ids"} form); DPO [kPrompt, kChosen, kRejected];
// GRPO [kPrompt, then kGrpoCompletion or kGrpoCompletionLogprobs, one per
// completion]. Examples come out exactly as the same lines of token JSONL
// would (jsonl_data.h), seq_len truncation included.
//
// Open() checks everything before training starts — the header, every
// count against the file size, every offset, every span kind, every token id
// against the vocabulary, every reward and log-probability, and the lengths
// against seq_len — and a problem is InvalidArgument naming the file and what
// is wrong ("data.shard: example 17: span 3 ends at token 9000, beyond the
// 8192 tokens of the file"), never a crash. The token scan releases the pages
// it has read, so validation does not leave the dataset resident either.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/train/job_spec.h"
#include "worker/train/jsonl_data.h"

namespace sbp {

inline constexpr char kTokenShardMagic[8] = {'S', 'B', 'P', 'S', 'H', 'A', 'R', 'D'};
inline constexpr uint32_t kTokenShardVersion = 1;
inline constexpr int64_t kTokenShardHeaderBytes = 64;

enum class TokenSpanKind : uint8_t {
  kPrompt = 0,
  kTarget = 1,
  kCompletion = 2,
  kChosen = 3,
  kRejected = 4,
  kGrpoCompletion = 5,
  kGrpoCompletionLogprobs = 6,
};

// True when `bytes` starts with the shard magic (how a data path is detected).
bool LooksLikeTokenShards(absl::string_view bytes);

class TokenShards {
 public:
  // Maps and checks `path` for a job of `objective` with `options` (vocab,
  // seq_len, truncation). NotFound when the file does not exist.
  static absl::StatusOr<std::shared_ptr<const TokenShards>> Open(const std::string& path,
                                                                 Objective objective,
                                                                 const DataOptions& options);
  // The same over bytes already in memory (`name` in messages); `keep_alive`
  // owns them. `release`, when given, is called with ranges of the token
  // section that have been checked and need not stay resident.
  static absl::StatusOr<std::shared_ptr<const TokenShards>> Parse(
      absl::string_view bytes, std::string name, Objective objective, const DataOptions& options,
      std::shared_ptr<const void> keep_alive = nullptr,
      const std::function<void(const char*, size_t)>& release = nullptr);

  Objective objective() const { return objective_; }
  int64_t size() const { return examples_; }  // examples
  int64_t total_tokens() const { return tokens_; }

  // Example `index` as the JSONL loader would return it (CHECKs the
  // objective and the index; Open has validated everything else).
  TokenSequence Sft(int64_t index) const;
  DpoPair Dpo(int64_t index) const;
  GrpoGroup Grpo(int64_t index) const;

 private:
  TokenShards() = default;
  absl::Status Validate(const std::function<void(const char*, size_t)>& release) const;
  absl::Status ValidateExample(int64_t index) const;
  bool HasTarget(int64_t index) const;  // some position has a label, after truncation
  std::vector<int32_t> SpanIds(int64_t span) const;
  uint64_t ExampleSpan(int64_t i) const;  // example_spans[i]
  uint64_t SpanToken(uint64_t j) const;   // span_tokens[j]
  TokenSpanKind Kind(uint64_t span) const;
  double Reward(uint64_t span) const;

  std::string name_;
  Objective objective_ = Objective::kSft;
  DataOptions options_;
  std::shared_ptr<const void> keep_alive_;
  int token_bytes_ = 2;
  bool has_logprobs_ = false;
  int64_t examples_ = 0, spans_ = 0, tokens_ = 0;
  const char* tokens_at_ = nullptr;
  const char* logprobs_at_ = nullptr;
  const char* example_spans_at_ = nullptr;
  const char* span_tokens_at_ = nullptr;
  const char* span_rewards_at_ = nullptr;
  const char* span_kinds_at_ = nullptr;
};

// Writes examples as a shard file (atomically: path.tmp, then renamed), token
// ids as u16 when `vocab_size` <= 65536. SFT labels must each be -100 or
// the token id at that position (InvalidArgument naming the example otherwise).
absl::Status WriteTokenShards(const std::string& path, const std::vector<TokenSequence>& sft,
                              int64_t vocab_size);
absl::Status WriteTokenShards(const std::string& path, const std::vector<DpoPair>& dpo,
                              int64_t vocab_size);
absl::Status WriteTokenShards(const std::string& path, const std::vector<GrpoGroup>& grpo,
                              int64_t vocab_size);

}  // namespace sbp
