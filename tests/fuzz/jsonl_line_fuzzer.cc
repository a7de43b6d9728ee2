// libFuzzer target for the JSONL line parsers (SFT, DPO, GRPO, prompts): any line gives
// an example or an InvalidArgument naming the line, never a crash or an
// escaping exception, and an accepted example respects the options (ids in
// the vocabulary, at most seq_len tokens).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "worker/train/jsonl_data.h"

namespace {

constexpr char kWhere[] = "fuzz.jsonl:1";

void CheckError(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
  if (!absl::StartsWith(status.message(), kWhere)) __builtin_trap();
}

void CheckSequence(const sbp::TokenSequence& s, const sbp::DataOptions& options) {
  if (s.input_ids.size() != s.labels.size()) __builtin_trap();
  if (options.seq_len > 0 && static_cast<int64_t>(s.input_ids.size()) > options.seq_len) {
    __builtin_trap();
  }
  for (int32_t id : s.input_ids) {
    if (id < 0 || id >= options.vocab_size) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view line(reinterpret_cast<const char*>(data), size);
  // The first byte picks the limits, so that truncation is reached too.
  const uint8_t knob = size > 0 ? data[0] : 0;
  sbp::DataOptions options;
  options.vocab_size = 1 + (knob & 0x3f) * 8;
  options.seq_len = (knob & 0x40) ? 1 + (knob & 0x0f) : 0;
  options.truncation = (knob & 0x80) ? sbp::Truncation::kTruncate : sbp::Truncation::kReject;

  auto sft = sbp::ParseSftLine(line, options, kWhere);
  if (sft.ok()) {
    CheckSequence(*sft, options);
  } else {
    CheckError(sft.status());
  }
  auto dpo = sbp::ParseDpoLine(line, options, kWhere);
  if (dpo.ok()) {
    CheckSequence(dpo->chosen, options);
    CheckSequence(dpo->rejected, options);
  } else {
    CheckError(dpo.status());
  }
  auto grpo = sbp::ParseGrpoLine(line, options, kWhere);
  if (grpo.ok()) {
    if (grpo->completions.empty()) __builtin_trap();
    for (size_t i = 0; i < grpo->completions.size(); ++i) {
      CheckSequence(sbp::GrpoSequence(*grpo, i), options);
    }
  } else {
    CheckError(grpo.status());
  }
  // Online GRPO's prompts: room for 2 new tokens within seq_len.
  auto prompt = sbp::ParsePromptLine(line, options, 2, kWhere);
  if (prompt.ok()) {
    if (prompt->prompt.empty() || prompt->fields.contains("prompt_ids")) __builtin_trap();
    if (options.seq_len > 0 && static_cast<int64_t>(prompt->prompt.size()) + 2 > options.seq_len) {
      __builtin_trap();
    }
    for (int32_t id : prompt->prompt) {
      if (id < 0 || id >= options.vocab_size) __builtin_trap();
    }
  } else {
    CheckError(prompt.status());
  }
  return 0;
}
