#include "worker/train/token_shards.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "worker/model/file_util.h"

namespace sbp {
namespace {

template <typename T>
T Load(const char* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

uint64_t PadTo8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

absl::string_view ObjectiveOf(uint32_t code) {
  switch (code) {
    case 0:
      return "sft";
    case 1:
      return "dpo";
    case 2:
      return "grpo";
  }
  return "";
}

uint32_t ObjectiveCode(Objective objective) {
  switch (objective) {
    case Objective::kSft:
      return 0;
    case Objective::kDpo:
      return 1;
    case Objective::kGrpo:
      return 2;
  }
  return 0;
}

// ObjectiveName without the job spec library (the fuzzer links this file alone).
absl::string_view NameOf(Objective objective) { return ObjectiveOf(ObjectiveCode(objective)); }

bool IsGrpoCompletion(TokenSpanKind kind) {
  return kind == TokenSpanKind::kGrpoCompletion || kind == TokenSpanKind::kGrpoCompletionLogprobs;
}

// Tokens are checked in blocks of this many bytes, each released after.
constexpr size_t kScanBlockBytes = size_t{16} << 20;

}  // namespace

bool LooksLikeTokenShards(absl::string_view bytes) {
  return bytes.size() >= sizeof(kTokenShardMagic) &&
         std::memcmp(bytes.data(), kTokenShardMagic, sizeof(kTokenShardMagic)) == 0;
}

absl::StatusOr<std::shared_ptr<const TokenShards>> TokenShards::Open(const std::string& path,
                                                                     Objective objective,
                                                                     const DataOptions& options) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
  if (absl::IsNotFound(mapped.status())) {
    return absl::NotFoundError(absl::StrCat("data file '", path, "' does not exist"));
  }
  if (!mapped.ok()) return mapped.status();
  std::shared_ptr<const MappedFile> file = *std::move(mapped);
  const absl::string_view bytes = file->bytes();
  const long page = ::sysconf(_SC_PAGESIZE);
  // Drops checked pages from this process (they stay in the page cache).
  auto release = [page](const char* begin, size_t size) {
    const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
    const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + size) / page * page;
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  };
  return Parse(bytes, path, objective, options, file, release);
}

absl::StatusOr<std::shared_ptr<const TokenShards>> TokenShards::Parse(
    absl::string_view bytes, std::string name, Objective objective, const DataOptions& options,
    std::shared_ptr<const void> keep_alive,
    const std::function<void(const char*, size_t)>& release) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", why));
  };
  const uint64_t size = bytes.size();
  if (size < static_cast<uint64_t>(kTokenShardHeaderBytes)) {
    return bad(absl::StrCat("is ", size, " bytes, shorter than the ", kTokenShardHeaderBytes,
                            "-byte token shard header (truncated?)"));
  }
  const char* at = bytes.data();
  if (!LooksLikeTokenShards(bytes)) {
    return bad("not a token shard file (bad magic: it does not start with \"SBPSHARD\")");
  }
  const uint32_t version = Load<uint32_t>(at + 8);
  if (version != kTokenShardVersion) {
    return bad(absl::StrCat("token shard format version ", version, "; this build reads version ",
                            kTokenShardVersion));
  }
  const uint32_t objective_code = Load<uint32_t>(at + 12);
  if (ObjectiveOf(objective_code).empty()) {
    return bad(absl::StrCat("unknown objective code ", objective_code, " in the header"));
  }
  if (objective_code != ObjectiveCode(objective)) {
    return bad(absl::StrCat("holds ", ObjectiveOf(objective_code),
                            " examples but the job's objective is ", NameOf(objective)));
  }
  const uint32_t token_bytes = Load<uint32_t>(at + 16);
  if (token_bytes != 2 && token_bytes != 4) {
    return bad(absl::StrCat("token ids of ", token_bytes, " bytes (2 or 4 are defined)"));
  }
  const uint32_t flags = Load<uint32_t>(at + 20);
  if ((flags & ~uint32_t{1}) != 0) return bad(absl::StrCat("unknown header flags ", flags));
  const uint64_t examples = Load<uint64_t>(at + 24);
  const uint64_t spans = Load<uint64_t>(at + 32);
  const uint64_t tokens = Load<uint64_t>(at + 40);
  // Every count is bounded by the bytes it needs, so nothing below overflows.
  if (examples > size / 8 || spans > size / 8 || tokens > size / token_bytes) {
    return bad(absl::StrCat("the header claims ", examples, " examples, ", spans, " spans and ",
                            tokens, " tokens, more than a file of ", size, " bytes can hold"));
  }
  if (examples == 0) return bad("no examples");
  const bool has_logprobs = (flags & 1) != 0;
  uint64_t offset = kTokenShardHeaderBytes;
  const uint64_t tokens_at = offset;
  offset = PadTo8(offset + tokens * token_bytes);
  const uint64_t logprobs_at = offset;
  if (has_logprobs) offset = PadTo8(offset + tokens * 4);
  const uint64_t example_spans_at = offset;
  offset += (examples + 1) * 8;
  const uint64_t span_tokens_at = offset;
  offset += (spans + 1) * 8;
  const uint64_t span_rewards_at = offset;
  offset += spans * 8;
  const uint64_t span_kinds_at = offset;
  offset += spans;
  if (offset != size) {
    return bad(absl::StrCat("is ", size, " bytes but its header (", examples, " examples, ", spans,
                            " spans, ", tokens, " tokens) describes ", offset,
                            " bytes (truncated or not written completely?)"));
  }
  std::shared_ptr<TokenShards> shards(new TokenShards());
  shards->name_ = std::move(name);
  shards->objective_ = objective;
  shards->options_ = options;
  shards->keep_alive_ = std::move(keep_alive);
  shards->token_bytes_ = static_cast<int>(token_bytes);
  shards->has_logprobs_ = has_logprobs;
  shards->examples_ = static_cast<int64_t>(examples);
  shards->spans_ = static_cast<int64_t>(spans);
  shards->tokens_ = static_cast<int64_t>(tokens);
  shards->tokens_at_ = at + tokens_at;
  shards->logprobs_at_ = has_logprobs ? at + logprobs_at : nullptr;
  shards->example_spans_at_ = at + example_spans_at;
  shards->span_tokens_at_ = at + span_tokens_at;
  shards->span_rewards_at_ = at + span_rewards_at;
  shards->span_kinds_at_ = at + span_kinds_at;
  RETURN_IF_ERROR(shards->Validate(release));
  return std::shared_ptr<const TokenShards>(std::move(shards));
}

uint64_t TokenShards::ExampleSpan(int64_t i) const {
  return Load<uint64_t>(example_spans_at_ + 8 * i);
}
uint64_t TokenShards::SpanToken(uint64_t j) const {
  return Load<uint64_t>(span_tokens_at_ + 8 * j);
}
TokenSpanKind TokenShards::Kind(uint64_t span) const {
  return static_cast<TokenSpanKind>(static_cast<uint8_t>(span_kinds_at_[span]));
}
double TokenShards::Reward(uint64_t span) const {
  return Load<double>(span_rewards_at_ + 8 * span);
}

absl::Status TokenShards::Validate(const std::function<void(const char*, size_t)>& release) const {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": ", why));
  };
  const uint64_t spans = static_cast<uint64_t>(spans_), tokens = static_cast<uint64_t>(tokens_);
  if (ExampleSpan(0) != 0 || ExampleSpan(examples_) != spans) {
    return bad(absl::StrCat("the example index runs from span ", ExampleSpan(0), " to span ",
                            ExampleSpan(examples_), ", not 0 to ", spans));
  }
  if (SpanToken(0) != 0 || SpanToken(spans) != tokens) {
    return bad(absl::StrCat("the span index runs from token ", SpanToken(0), " to token ",
                            SpanToken(spans), ", not 0 to ", tokens));
  }
  for (uint64_t j = 0; j < spans; ++j) {
    if (SpanToken(j + 1) <= SpanToken(j)) {
      return bad(absl::StrCat("span ", j, " is empty or runs backwards (tokens ", SpanToken(j),
                              " to ", SpanToken(j + 1), ")"));
    }
    if (SpanToken(j + 1) > tokens) {
      return bad(absl::StrCat("span ", j, " ends at token ", SpanToken(j + 1), ", beyond the ",
                              tokens, " tokens of the file"));
    }
  }
  bool any_target = objective_ != Objective::kSft;
  for (int64_t i = 0; i < examples_; ++i) {
    if (ExampleSpan(i + 1) <= ExampleSpan(i) || ExampleSpan(i + 1) > spans) {
      return bad(absl::StrCat("example ", i, " has spans ", ExampleSpan(i), " to ",
                              ExampleSpan(i + 1), " (none, backwards, or beyond the ", spans,
                              " spans of the file)"));
    }
    RETURN_IF_ERROR(ValidateExample(i));
    if (!any_target) any_target = HasTarget(i);
  }
  if (!any_target) {
    return bad(
        "no token has a loss (every label after the first position of every example is "
        "-100)");
  }
  // Token ids, block by block, released once checked.
  const uint64_t vocab = static_cast<uint64_t>(std::max<int64_t>(options_.vocab_size, 0));
  const size_t total = static_cast<size_t>(tokens) * token_bytes_;
  for (size_t begin = 0; begin < total; begin += kScanBlockBytes) {
    const size_t end = std::min(total, begin + kScanBlockBytes);
    for (size_t b = begin; b < end; b += token_bytes_) {
      const uint64_t id =
          token_bytes_ == 2 ? Load<uint16_t>(tokens_at_ + b) : Load<uint32_t>(tokens_at_ + b);
      if (id >= vocab) {
        return bad(absl::StrCat("token ", b / token_bytes_, " = ", id,
                                " is outside the vocabulary [0, ", vocab, ")"));
      }
    }
    if (release) release(tokens_at_ + begin, end - begin);
  }
  return absl::OkStatus();
}

absl::Status TokenShards::ValidateExample(int64_t index) const {
  const uint64_t first = ExampleSpan(index), last = ExampleSpan(index + 1);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": example ", index, ": ", why));
  };
  auto length = [&](uint64_t j) { return static_cast<int64_t>(SpanToken(j + 1) - SpanToken(j)); };
  const int64_t n = static_cast<int64_t>(last - first);
  const int64_t seq_len = options_.seq_len;
  const bool reject = options_.truncation == Truncation::kReject;
  // Prompt + response within seq_len, as the JSONL loader requires.
  auto check_response = [&](uint64_t span, absl::string_view what) -> absl::Status {
    const int64_t prompt = length(first), total = prompt + length(span);
    if (seq_len > 0 && total > seq_len && (reject || prompt >= seq_len)) {
      return bad(absl::StrCat("prompt + ", what, " has ", total, " tokens (", prompt, " + ",
                              length(span), "), longer than seq_len ", seq_len,
                              reject ? " (truncation: truncate keeps the first seq_len)"
                                     : " with no room left after the prompt"));
    }
    return absl::OkStatus();
  };
  const TokenSpanKind head = Kind(first);
  switch (objective_) {
    case Objective::kSft: {
      if (n == 2 && head == TokenSpanKind::kPrompt &&
          Kind(first + 1) == TokenSpanKind::kCompletion) {
        return check_response(first + 1, "completion");
      }
      int64_t total = 0;
      for (uint64_t j = first; j < last; ++j) {
        if (Kind(j) != TokenSpanKind::kPrompt && Kind(j) != TokenSpanKind::kTarget) {
          return bad(absl::StrCat("span ", j, " has kind ", static_cast<int>(Kind(j)),
                                  "; an sft example is prompt/target spans or [prompt, "
                                  "completion]"));
        }
        total += length(j);
      }
      if (seq_len > 0 && total > seq_len && reject) {
        return bad(absl::StrCat("has ", total, " tokens, longer than seq_len ", seq_len,
                                " (truncation: truncate keeps the first seq_len)"));
      }
      return absl::OkStatus();
    }
    case Objective::kDpo:
      if (n != 3 || head != TokenSpanKind::kPrompt || Kind(first + 1) != TokenSpanKind::kChosen ||
          Kind(first + 2) != TokenSpanKind::kRejected) {
        return bad("a dpo example is exactly [prompt, chosen, rejected] spans");
      }
      RETURN_IF_ERROR(check_response(first + 1, "chosen"));
      return check_response(first + 2, "rejected");
    case Objective::kGrpo: {
      if (n < 2 || head != TokenSpanKind::kPrompt) {
        return bad("a grpo example is a prompt span and at least one completion span");
      }
      if (seq_len > 0 && length(first) >= seq_len) {
        return bad(absl::StrCat("prompt has ", length(first),
                                " tokens, which leaves no room for completions within seq_len ",
                                seq_len));
      }
      for (uint64_t j = first + 1; j < last; ++j) {
        if (!IsGrpoCompletion(Kind(j))) {
          return bad(absl::StrCat("span ", j, " has kind ", static_cast<int>(Kind(j)),
                                  ", not a completion"));
        }
        if (!std::isfinite(Reward(j))) {
          return bad(absl::StrCat("span ", j, " has a reward that is not a finite number"));
        }
        RETURN_IF_ERROR(check_response(j, "completion"));
        if (Kind(j) != TokenSpanKind::kGrpoCompletionLogprobs) continue;
        if (!has_logprobs_) {
          return bad(absl::StrCat("span ", j, " has old_logprobs but the file has none"));
        }
        for (uint64_t t = SpanToken(j); t < SpanToken(j + 1); ++t) {
          const float logprob = Load<float>(logprobs_at_ + 4 * t);
          if (!std::isfinite(logprob) || logprob > kMaxOldLogprob) {
            return bad(absl::StrCat("old log-probability of token ", t, " = ", logprob,
                                    " is not a log-probability (finite, <= 0)"));
          }
        }
      }
      return absl::OkStatus();
    }
  }
  return bad("unknown objective");
}

bool TokenShards::HasTarget(int64_t index) const {
  const uint64_t first = ExampleSpan(index), last = ExampleSpan(index + 1);
  // [prompt, completion]: the completion keeps at least one token after a
  // non-empty prompt (ValidateExample made sure of the room).
  if (last - first == 2 && Kind(first + 1) == TokenSpanKind::kCompletion) return true;
  // Position p has a target when 1 <= p < the kept length and p is in a
  // target span (the loss at t predicts the label at t + 1).
  uint64_t kept = SpanToken(last) - SpanToken(first);
  if (options_.seq_len > 0) kept = std::min<uint64_t>(kept, options_.seq_len);
  for (uint64_t j = first; j < last; ++j) {
    const uint64_t begin = std::max<uint64_t>(SpanToken(j) - SpanToken(first), 1);
    const uint64_t end = std::min<uint64_t>(SpanToken(j + 1) - SpanToken(first), kept);
    if (Kind(j) == TokenSpanKind::kTarget && begin < end) return true;
  }
  return false;
}

std::vector<int32_t> TokenShards::SpanIds(int64_t span) const {
  const uint64_t begin = SpanToken(span), end = SpanToken(span + 1);
  std::vector<int32_t> ids(end - begin);
  for (uint64_t t = begin; t < end; ++t) {
    ids[t - begin] = token_bytes_ == 2 ? static_cast<int32_t>(Load<uint16_t>(tokens_at_ + 2 * t))
                                       : static_cast<int32_t>(Load<uint32_t>(tokens_at_ + 4 * t));
  }
  return ids;
}

TokenSequence TokenShards::Sft(int64_t index) const {
  CHECK(objective_ == Objective::kSft) << name_ << " holds " << NameOf(objective_);
  CHECK(index >= 0 && index < examples_) << "example " << index << " of " << examples_;
  const uint64_t first = ExampleSpan(index), last = ExampleSpan(index + 1);
  if (last - first == 2 && Kind(first + 1) == TokenSpanKind::kCompletion) {
    absl::StatusOr<TokenSequence> s =
        PromptResponseSequence(SpanIds(first), SpanIds(first + 1), "completion", options_, name_);
    CHECK(s.ok()) << s.status();  // Open checked the lengths
    return *std::move(s);
  }
  TokenSequence s;
  for (uint64_t j = first; j < last; ++j) {
    const std::vector<int32_t> ids = SpanIds(j);
    s.input_ids.insert(s.input_ids.end(), ids.begin(), ids.end());
    if (Kind(j) == TokenSpanKind::kTarget) {
      s.labels.insert(s.labels.end(), ids.begin(), ids.end());
    } else {
      s.labels.insert(s.labels.end(), ids.size(), kIgnoreIndex);
    }
  }
  if (options_.seq_len > 0 && static_cast<int64_t>(s.input_ids.size()) > options_.seq_len) {
    s.input_ids.resize(options_.seq_len);
    s.labels.resize(options_.seq_len);
  }
  return s;
}

DpoPair TokenShards::Dpo(int64_t index) const {
  CHECK(objective_ == Objective::kDpo) << name_ << " holds " << NameOf(objective_);
  CHECK(index >= 0 && index < examples_) << "example " << index << " of " << examples_;
  const uint64_t first = ExampleSpan(index);
  const std::vector<int32_t> prompt = SpanIds(first);
  absl::StatusOr<TokenSequence> chosen =
      PromptResponseSequence(prompt, SpanIds(first + 1), "chosen", options_, name_);
  absl::StatusOr<TokenSequence> rejected =
      PromptResponseSequence(prompt, SpanIds(first + 2), "rejected", options_, name_);
  CHECK(chosen.ok() && rejected.ok()) << name_ << ": example " << index;
  return DpoPair{*std::move(chosen), *std::move(rejected)};
}

GrpoGroup TokenShards::Grpo(int64_t index) const {
  CHECK(objective_ == Objective::kGrpo) << name_ << " holds " << NameOf(objective_);
  CHECK(index >= 0 && index < examples_) << "example " << index << " of " << examples_;
  const uint64_t first = ExampleSpan(index), last = ExampleSpan(index + 1);
  GrpoGroup group;
  group.prompt = SpanIds(first);
  const int64_t prompt_len = static_cast<int64_t>(group.prompt.size());
  for (uint64_t j = first + 1; j < last; ++j) {
    GrpoCompletion c;
    c.ids = SpanIds(j);
    c.reward = Reward(j);
    if (Kind(j) == TokenSpanKind::kGrpoCompletionLogprobs) {
      for (uint64_t t = SpanToken(j); t < SpanToken(j + 1); ++t) {
        c.old_logprobs.push_back(Load<float>(logprobs_at_ + 4 * t));
      }
    }
    const int64_t total = prompt_len + static_cast<int64_t>(c.ids.size());
    if (options_.seq_len > 0 && total > options_.seq_len) {
      const size_t keep = static_cast<size_t>(options_.seq_len - prompt_len);
      c.ids.resize(keep);
      if (!c.old_logprobs.empty()) c.old_logprobs.resize(keep);
    }
    group.completions.push_back(std::move(c));
  }
  return group;
}

// ---------------------------------------------------------------------------
// Writing

namespace {

struct Span {
  TokenSpanKind kind;
  const int32_t* ids;
  size_t size;
  double reward = 0;
  const std::vector<float>* logprobs = nullptr;
};

class ShardBuilder {
 public:
  ShardBuilder(Objective objective, int64_t vocab_size)
      : objective_(objective), token_bytes_(vocab_size <= 65536 ? 2 : 4) {
    example_spans_.push_back(0);
    span_tokens_.push_back(0);
  }

  void Add(const std::vector<Span>& spans) {
    for (const Span& s : spans) {
      for (size_t i = 0; i < s.size; ++i) {
        if (token_bytes_ == 2) {
          Put(tokens_, static_cast<uint16_t>(s.ids[i]));
        } else {
          Put(tokens_, static_cast<uint32_t>(s.ids[i]));
        }
      }
      if (s.logprobs != nullptr && !has_logprobs_) {
        has_logprobs_ = true;
        logprobs_.assign(span_tokens_.back(), 0.0f);  // the tokens before this span
      }
      if (has_logprobs_) {
        for (size_t i = 0; i < s.size; ++i) {
          logprobs_.push_back(s.logprobs != nullptr ? (*s.logprobs)[i] : 0.0f);
        }
      }
      span_tokens_.push_back(span_tokens_.back() + s.size);
      rewards_.push_back(s.reward);
      kinds_.push_back(static_cast<uint8_t>(s.kind));
    }
    example_spans_.push_back(kinds_.size());
  }

  absl::Status Write(const std::string& path) const {
    std::string header(kTokenShardMagic, sizeof(kTokenShardMagic));
    Put(header, kTokenShardVersion);
    Put(header, ObjectiveCode(objective_));
    Put(header, static_cast<uint32_t>(token_bytes_));
    Put(header, static_cast<uint32_t>(has_logprobs_ ? 1 : 0));
    Put(header, static_cast<uint64_t>(example_spans_.size() - 1));
    Put(header, static_cast<uint64_t>(kinds_.size()));
    Put(header, static_cast<uint64_t>(span_tokens_.back()));
    header.append(16, '\0');
    std::string body(PadTo8(tokens_.size()) - tokens_.size(), '\0');
    if (has_logprobs_) {
      for (float v : logprobs_) Put(body, v);
      const uint64_t end = header.size() + tokens_.size() + body.size();
      body.append(PadTo8(end) - end, '\0');
    }
    for (uint64_t v : example_spans_) Put(body, v);
    for (uint64_t v : span_tokens_) Put(body, v);
    for (double v : rewards_) Put(body, v);
    body.append(reinterpret_cast<const char*>(kinds_.data()), kinds_.size());
    ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> writer, AtomicFileWriter::Create(path));
    RETURN_IF_ERROR(writer->Append(header));
    RETURN_IF_ERROR(writer->Append(tokens_));
    RETURN_IF_ERROR(writer->Append(body));
    return writer->Commit();
  }

 private:
  Objective objective_;
  int token_bytes_;
  bool has_logprobs_ = false;
  std::string tokens_;
  std::vector<float> logprobs_;
  std::vector<uint64_t> example_spans_, span_tokens_;
  std::vector<double> rewards_;
  std::vector<uint8_t> kinds_;
};

// Leading labels of -100: the prompt that PromptResponseSequence masked.
size_t MaskedPrefix(const TokenSequence& s) {
  size_t n = 0;
  while (n < s.labels.size() && s.labels[n] == kIgnoreIndex) ++n;
  return n;
}

}  // namespace

absl::Status WriteTokenShards(const std::string& path, const std::vector<TokenSequence>& sft,
                              int64_t vocab_size) {
  ShardBuilder builder(Objective::kSft, vocab_size);
  for (size_t i = 0; i < sft.size(); ++i) {
    const TokenSequence& s = sft[i];
    RETURN_IF_ERROR(ValidateSequence(s, vocab_size, absl::StrCat(path, ": example ", i)));
    std::vector<Span> spans;
    for (size_t t = 0; t < s.input_ids.size();) {
      const bool target = s.labels[t] != kIgnoreIndex;
      size_t end = t;
      while (end < s.input_ids.size() && (s.labels[end] != kIgnoreIndex) == target) {
        if (target && s.labels[end] != s.input_ids[end]) {
          return absl::InvalidArgumentError(absl::StrCat(
              path, ": example ", i, ": labels[", end, "] = ", s.labels[end],
              " is neither -100 nor input_ids[", end, "] (shards store a loss mask, not labels)"));
        }
        ++end;
      }
      spans.push_back(Span{target ? TokenSpanKind::kTarget : TokenSpanKind::kPrompt,
                           s.input_ids.data() + t, end - t});
      t = end;
    }
    if (spans.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": example ", i, " is empty"));
    }
    builder.Add(spans);
  }
  return builder.Write(path);
}

absl::Status WriteTokenShards(const std::string& path, const std::vector<DpoPair>& dpo,
                              int64_t vocab_size) {
  ShardBuilder builder(Objective::kDpo, vocab_size);
  for (size_t i = 0; i < dpo.size(); ++i) {
    const TokenSequence& c = dpo[i].chosen;
    const TokenSequence& r = dpo[i].rejected;
    const size_t prompt = MaskedPrefix(c);
    if (prompt == 0 || prompt >= c.input_ids.size() || MaskedPrefix(r) != prompt ||
        r.input_ids.size() <= prompt ||
        !std::equal(c.input_ids.begin(), c.input_ids.begin() + prompt, r.input_ids.begin())) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": example ", i, ": chosen and rejected do not share one masked prompt"));
    }
    builder.Add(
        {Span{TokenSpanKind::kPrompt, c.input_ids.data(), prompt},
         Span{TokenSpanKind::kChosen, c.input_ids.data() + prompt, c.input_ids.size() - prompt},
         Span{TokenSpanKind::kRejected, r.input_ids.data() + prompt, r.input_ids.size() - prompt}});
  }
  return builder.Write(path);
}

absl::Status WriteTokenShards(const std::string& path, const std::vector<GrpoGroup>& grpo,
                              int64_t vocab_size) {
  ShardBuilder builder(Objective::kGrpo, vocab_size);
  for (const GrpoGroup& g : grpo) {
    std::vector<Span> spans = {Span{TokenSpanKind::kPrompt, g.prompt.data(), g.prompt.size()}};
    for (const GrpoCompletion& c : g.completions) {
      const bool logprobs = !c.old_logprobs.empty();
      spans.push_back(
          Span{logprobs ? TokenSpanKind::kGrpoCompletionLogprobs : TokenSpanKind::kGrpoCompletion,
               c.ids.data(), c.ids.size(), c.reward, logprobs ? &c.old_logprobs : nullptr});
    }
    builder.Add(spans);
  }
  return builder.Write(path);
}

}  // namespace sbp
