#include "worker/train/dataset.h"

#include <cstdint>
#include <limits>
#include <numeric>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/input_limits.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace sbp {

DataOptions DataOptionsForJob(const JobSpec& spec, int64_t vocab_size) {
  return DataOptions{vocab_size, spec.seq_len, spec.truncation};
}

namespace {

// True when `path` starts with the token shard magic (a missing or unreadable
// file is left to the loaders, which name the problem).
bool IsTokenShardFile(const std::string& path) {
  absl::StatusOr<RegularFile> file =
      RegularFile::Open(path, std::numeric_limits<int64_t>::max(), "a data file");
  if (!file.ok()) return false;
  char head[sizeof(kTokenShardMagic)];
  size_t got = 0;
  while (got < sizeof(head)) {
    absl::StatusOr<size_t> n = file->Read(head + got, sizeof(head) - got);
    if (!n.ok() || *n == 0) break;
    got += *n;
  }
  return LooksLikeTokenShards(absl::string_view(head, got));
}

}  // namespace

absl::StatusOr<Dataset> Dataset::Load(Objective objective, const std::string& path,
                                      const DataOptions& options) {
  if (IsTokenShardFile(path)) {
    ASSIGN_OR_RETURN(std::shared_ptr<const TokenShards> shards,
                     TokenShards::Open(path, objective, options));
    return Dataset(std::move(shards));
  }
  switch (objective) {
    case Objective::kSft: {
      ASSIGN_OR_RETURN(std::vector<TokenSequence> sft, LoadSftJsonl(path, options));
      return Dataset(std::move(sft));
    }
    case Objective::kDpo: {
      ASSIGN_OR_RETURN(std::vector<DpoPair> dpo, LoadDpoJsonl(path, options));
      return Dataset(std::move(dpo));
    }
    case Objective::kGrpo: {
      ASSIGN_OR_RETURN(std::vector<GrpoGroup> grpo, LoadGrpoJsonl(path, options));
      return Dataset(std::move(grpo));
    }
  }
  return absl::InvalidArgumentError("unknown objective");
}

absl::StatusOr<Dataset> Dataset::LoadForJob(const JobSpec& spec, absl::string_view base_dir,
                                            int64_t vocab_size) {
  if (spec.grpo.online()) {
    const std::string path = ResolveJobPath(base_dir, spec.data);
    if (IsTokenShardFile(path)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data: '", path, "' is a token shard file; online GRPO reads a prompt JSONL file"));
    }
    ASSIGN_OR_RETURN(std::vector<RolloutPrompt> prompts,
                     LoadPromptJsonl(path, DataOptionsForJob(spec, vocab_size),
                                     spec.grpo.rollout.max_new_tokens));
    return Dataset(std::move(prompts));
  }
  return Load(spec.objective, ResolveJobPath(base_dir, spec.data),
              DataOptionsForJob(spec, vocab_size));
}

Objective Dataset::objective() const {
  if (shards_) return shards_->objective();
  switch (examples_.index()) {
    case 1:
      return Objective::kDpo;
    case 2:
    case 3:
      return Objective::kGrpo;
    default:
      return Objective::kSft;
  }
}

int64_t Dataset::size() const {
  if (shards_) return shards_->size();
  return std::visit([](const auto& v) { return static_cast<int64_t>(v.size()); }, examples_);
}

int64_t Dataset::TokenCount(int64_t index) const {
  CHECK(index >= 0 && index < size()) << "example " << index << " of " << size();
  switch (objective()) {
    case Objective::kSft:
      return static_cast<int64_t>(SftAt(index).input_ids.size());
    case Objective::kDpo: {
      const DpoPair pair = DpoAt(index);
      return static_cast<int64_t>(pair.chosen.input_ids.size() + pair.rejected.input_ids.size());
    }
    case Objective::kGrpo: {
      if (is_prompts()) return static_cast<int64_t>(PromptAt(index).prompt.size());
      const GrpoGroup g = GrpoAt(index);
      int64_t tokens = 0;
      for (const GrpoCompletion& c : g.completions) {
        tokens += static_cast<int64_t>(g.prompt.size() + c.ids.size());
      }
      return tokens;
    }
  }
  return 0;
}

TokenSequence Dataset::SftAt(int64_t index) const {
  if (shards_) return shards_->Sft(index);
  CHECK(index >= 0 && index < size()) << "example " << index << " of " << size();
  return sft()[static_cast<size_t>(index)];
}

DpoPair Dataset::DpoAt(int64_t index) const {
  if (shards_) return shards_->Dpo(index);
  CHECK(index >= 0 && index < size()) << "example " << index << " of " << size();
  return dpo()[static_cast<size_t>(index)];
}

GrpoGroup Dataset::GrpoAt(int64_t index) const {
  if (shards_) return shards_->Grpo(index);
  CHECK(index >= 0 && index < size()) << "example " << index << " of " << size();
  return grpo()[static_cast<size_t>(index)];
}

const RolloutPrompt& Dataset::PromptAt(int64_t index) const {
  CHECK(is_prompts()) << "the dataset holds no prompts";
  CHECK(index >= 0 && index < size()) << "example " << index << " of " << size();
  return std::get<3>(examples_)[static_cast<size_t>(index)];
}

const std::vector<TokenSequence>& Dataset::sft() const {
  CHECK(!shards_) << "the dataset is memory-mapped shards; use SftAt";
  CHECK(examples_.index() == 0) << "the dataset holds " << ObjectiveName(objective())
                                << " examples, not sft";
  return std::get<0>(examples_);
}

const std::vector<DpoPair>& Dataset::dpo() const {
  CHECK(!shards_) << "the dataset is memory-mapped shards; use DpoAt";
  CHECK(examples_.index() == 1) << "the dataset holds " << ObjectiveName(objective())
                                << " examples, not dpo";
  return std::get<1>(examples_);
}

const std::vector<GrpoGroup>& Dataset::grpo() const {
  CHECK(!shards_) << "the dataset is memory-mapped shards; use GrpoAt";
  CHECK(examples_.index() == 2) << "the dataset holds " << ObjectiveName(objective())
                                << " examples, not grpo";
  return std::get<2>(examples_);
}

uint64_t SplitMix64Mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

namespace {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return SplitMix64Mix(state_);
  }
  // Uniform in [0, n), n > 0: rejects the low values that would bias `% n`.
  uint64_t Below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    while (true) {
      const uint64_t r = Next();
      if (r >= threshold) return r % n;
    }
  }

 private:
  uint64_t state_;
};

}  // namespace

std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch, int64_t size) {
  std::vector<int64_t> order(static_cast<size_t>(size > 0 ? size : 0));
  std::iota(order.begin(), order.end(), int64_t{0});
  SplitMix64 rng(SplitMix64Mix(seed) ^ SplitMix64Mix(static_cast<uint64_t>(epoch) + 1));
  for (size_t i = order.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.Below(i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

DataCursor::DataCursor(int64_t size, uint64_t seed, bool shuffle)
    : size_(size), seed_(seed), shuffle_(shuffle) {
  CHECK_GT(size, 0) << "a data cursor needs a non-empty dataset";
  LoadOrder();
}

void DataCursor::LoadOrder() {
  if (shuffle_) {
    order_ = EpochOrder(seed_, epoch_, size_);
  } else {
    order_.resize(static_cast<size_t>(size_));
    std::iota(order_.begin(), order_.end(), int64_t{0});
  }
}

std::vector<int64_t> DataCursor::Next(int64_t n) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(n > 0 ? n : 0));
  for (int64_t k = 0; k < n; ++k) {
    if (position_ == size_) {
      ++epoch_;
      position_ = 0;
      LoadOrder();
    }
    out.push_back(order_[static_cast<size_t>(position_++)]);
  }
  return out;
}

std::string DataCursor::ToJson() const {
  nlohmann::json j = {{"epoch", epoch_},
                      {"position", position_},
                      {"size", size_},
                      {"seed", seed_},
                      {"shuffle", shuffle_}};
  return j.dump();
}

absl::StatusOr<DataCursor> DataCursor::FromJson(absl::string_view json, int64_t size, uint64_t seed,
                                                bool shuffle) {
  using Json = nlohmann::json;
  Json j = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  auto bad = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("data cursor: ", why));
  };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  for (const char* field : {"epoch", "position", "size", "seed"}) {
    if (!j.contains(field) || !j[field].is_number_integer()) {
      return bad(absl::StrCat("field '", field, "' must be an integer"));
    }
    // The seed is a uint64; the counters must fit an int64.
    if (std::string_view(field) != "seed" && j[field].is_number_unsigned() &&
        j[field].get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad(absl::StrCat("field '", field, "' is too large"));
    }
  }
  if (!j.contains("shuffle") || !j["shuffle"].is_boolean()) {
    return bad("field 'shuffle' must be true or false");
  }
  const int64_t saved_size = j["size"].get<int64_t>();
  const uint64_t saved_seed = j["seed"].get<uint64_t>();
  const bool saved_shuffle = j["shuffle"].get<bool>();
  if (saved_size != size || saved_seed != seed || saved_shuffle != shuffle) {
    return absl::FailedPreconditionError(
        absl::StrCat("data cursor: saved for ", saved_size, " examples, seed ", saved_seed,
                     saved_shuffle ? ", shuffled" : ", in file order", "; the job now has ", size,
                     " examples, seed ", seed, shuffle ? ", shuffled" : ", in file order",
                     " (the data or seed changed since the checkpoint)"));
  }
  const int64_t epoch = j["epoch"].get<int64_t>();
  const int64_t position = j["position"].get<int64_t>();
  if (epoch < 0 || position < 0 || position > size ||
      (size > 0 && epoch > std::numeric_limits<int64_t>::max() / size - 1)) {
    return bad(absl::StrCat("epoch ", epoch, ", position ", position, " is outside a dataset of ",
                            size, " examples"));
  }
  if (size <= 0) return bad("the dataset is empty");
  DataCursor cursor(size, seed, shuffle);
  cursor.epoch_ = epoch;
  cursor.position_ = position;
  cursor.LoadOrder();
  return cursor;
}

}  // namespace sbp
