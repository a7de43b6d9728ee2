// libFuzzer target for the token shard parser: any bytes give a dataset or an
// InvalidArgument naming the file, never a crash or a read outside the input,
// and every example of an accepted file comes out within the options (ids in
// the vocabulary, at most seq_len tokens, labels the ids or -100).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "worker/train/token_shards.h"

namespace {

constexpr char kName[] = "fuzz.shard";

void CheckSequence(const sbp::TokenSequence& s, const sbp::DataOptions& options) {
  if (s.input_ids.size() != s.labels.size() || s.input_ids.empty()) __builtin_trap();
  if (options.seq_len > 0 && static_cast<int64_t>(s.input_ids.size()) > options.seq_len) {
    __builtin_trap();
  }
  for (size_t i = 0; i < s.input_ids.size(); ++i) {
    if (s.input_ids[i] < 0 || s.input_ids[i] >= options.vocab_size) __builtin_trap();
    if (s.labels[i] != sbp::kIgnoreIndex && s.labels[i] != s.input_ids[i]) __builtin_trap();
  }
}

void Run(absl::string_view bytes, sbp::Objective objective, const sbp::DataOptions& options) {
  absl::StatusOr<std::shared_ptr<const sbp::TokenShards>> shards =
      sbp::TokenShards::Parse(bytes, kName, objective, options);
  if (!shards.ok()) {
    if (shards.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    if (!absl::StartsWith(shards.status().message(), kName)) __builtin_trap();
    return;
  }
  const sbp::TokenShards& s = **shards;
  for (int64_t i = 0; i < s.size() && i < 256; ++i) {
    switch (objective) {
      case sbp::Objective::kSft:
        CheckSequence(s.Sft(i), options);
        break;
      case sbp::Objective::kDpo: {
        const sbp::DpoPair pair = s.Dpo(i);
        CheckSequence(pair.chosen, options);
        CheckSequence(pair.rejected, options);
        break;
      }
      case sbp::Objective::kGrpo: {
        const sbp::GrpoGroup group = s.Grpo(i);
        if (group.completions.empty()) __builtin_trap();
        for (size_t c = 0; c < group.completions.size(); ++c) {
          CheckSequence(sbp::GrpoSequence(group, c), options);
          const auto& old = group.completions[c].old_logprobs;
          if (!old.empty() && old.size() != group.completions[c].ids.size()) __builtin_trap();
        }
        break;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so that a read past the end is caught.
  std::unique_ptr<char[]> copy(new char[size > 0 ? size : 1]);
  if (size > 0) std::memcpy(copy.get(), data, size);
  const absl::string_view bytes(copy.get(), size);
  // The objective the header names (so that most inputs get past that check),
  // with and without a seq_len that truncates.
  const uint8_t code = size > 12 ? data[12] : 0;
  const sbp::Objective objective = code == 1   ? sbp::Objective::kDpo
                                   : code == 2 ? sbp::Objective::kGrpo
                                               : sbp::Objective::kSft;
  Run(bytes, objective, {256, 0, sbp::Truncation::kReject});
  Run(bytes, objective, {256, 4, sbp::Truncation::kTruncate});
  Run(bytes, objective, {8, 6, sbp::Truncation::kReject});
  return 0;
}
