// A loaded dataset (one objective's examples) and the order the trainer
// walks it in. The examples are token JSONL read into memory, or a token
// shard file (token_shards.h) that stays memory-mapped: Load tells them
// apart by the file's first bytes, and either way example i is the same.
//
// Order: epoch e visits the examples in EpochOrder(seed, e, size), a
// Fisher-Yates shuffle driven by SplitMix64 — pure 64-bit integer arithmetic,
// so every platform, compiler and rank gets the same permutation. DataCursor
// is the position in that walk ({epoch, position}); it is saved in checkpoints
// (as JSON) so that a resumed run sees exactly the examples it would have.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/train/job_spec.h"
#include "worker/train/jsonl_data.h"
#include "worker/train/token_shards.h"

namespace sbp {

// The loader options a job implies: its seq_len and truncation rule.
DataOptions DataOptionsForJob(const JobSpec& spec, int64_t vocab_size);

class Dataset {
 public:
  Dataset() = default;  // an empty SFT dataset
  explicit Dataset(std::vector<TokenSequence> sft) : examples_(std::move(sft)) {}
  explicit Dataset(std::vector<DpoPair> dpo) : examples_(std::move(dpo)) {}
  explicit Dataset(std::vector<GrpoGroup> grpo) : examples_(std::move(grpo)) {}
  // Online GRPO's prompts (objective grpo).
  explicit Dataset(std::vector<RolloutPrompt> prompts) : examples_(std::move(prompts)) {}
  explicit Dataset(std::shared_ptr<const TokenShards> shards) : shards_(std::move(shards)) {}

  // Reads `path`, token shards or JSONL with the loader of `objective`.
  static absl::StatusOr<Dataset> Load(Objective objective, const std::string& path,
                                      const DataOptions& options);
  // Reads the job's data file (relative paths from `base_dir`): prompts
  // (LoadPromptJsonl) for online GRPO.
  static absl::StatusOr<Dataset> LoadForJob(const JobSpec& spec, absl::string_view base_dir,
                                            int64_t vocab_size);

  Objective objective() const;
  // Examples: sequences (SFT), pairs (DPO) or groups (GRPO).
  int64_t size() const;
  bool empty() const { return size() == 0; }
  // Tokens of example `index`, all of its sequences together.
  int64_t TokenCount(int64_t index) const;

  // Example `index` (a copy); each CHECKs the objective and the index.
  TokenSequence SftAt(int64_t index) const;
  DpoPair DpoAt(int64_t index) const;
  GrpoGroup GrpoAt(int64_t index) const;
  const RolloutPrompt& PromptAt(int64_t index) const;
  bool is_prompts() const { return !shards_ && examples_.index() == 3; }

  // True when the examples are a memory-mapped shard file.
  bool is_shards() const { return shards_ != nullptr; }

  // The examples of an in-memory dataset; each CHECKs that the dataset holds
  // that objective and is not shards.
  const std::vector<TokenSequence>& sft() const;
  const std::vector<DpoPair>& dpo() const;
  const std::vector<GrpoGroup>& grpo() const;

 private:
  std::variant<std::vector<TokenSequence>, std::vector<DpoPair>, std::vector<GrpoGroup>,
               std::vector<RolloutPrompt>>
      examples_;
  std::shared_ptr<const TokenShards> shards_;  // when set, examples_ is unused
};

// The permutation of [0, size) for `epoch`: Fisher-Yates from the back
// (i = size-1 .. 1, j uniform in [0, i] by rejection sampling) over a
// SplitMix64 stream seeded with SplitMix64Mix(seed) ^ SplitMix64Mix(epoch + 1).
std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch, int64_t size);

// The SplitMix64 output function (Steele, Lea, Flood 2014).
uint64_t SplitMix64Mix(uint64_t x);

// Where the trainer is in the walk over a dataset of `size` examples.
class DataCursor {
 public:
  // `shuffle` false walks every epoch in file order. CHECKs size > 0.
  DataCursor(int64_t size, uint64_t seed, bool shuffle = true);

  // The dataset indices of the next `n` examples, moving into the next epoch
  // (a fresh order) whenever one is used up.
  std::vector<int64_t> Next(int64_t n);

  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }  // examples of this epoch already taken
  int64_t examples_taken() const { return epoch_ * size_ + position_; }
  int64_t size() const { return size_; }
  uint64_t seed() const { return seed_; }
  bool shuffle() const { return shuffle_; }

  // {"epoch":…,"position":…,"size":…,"seed":…,"shuffle":…}
  std::string ToJson() const;
  // Restores a cursor saved by ToJson for a dataset of `size` examples with
  // this seed and shuffle setting; FailedPrecondition when the saved cursor
  // was made for a different dataset or seed (the resume would not be exact),
  // InvalidArgument when the text is not a cursor.
  static absl::StatusOr<DataCursor> FromJson(absl::string_view json, int64_t size, uint64_t seed,
                                             bool shuffle = true);

  bool operator==(const DataCursor& other) const {
    return size_ == other.size_ && seed_ == other.seed_ && shuffle_ == other.shuffle_ &&
           epoch_ == other.epoch_ && position_ == other.position_;
  }

 private:
  void LoadOrder();

  int64_t size_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> order_;  // of epoch_
};

}  // namespace sbp
