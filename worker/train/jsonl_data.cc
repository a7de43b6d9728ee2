#include "worker/train/jsonl_data.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/input_limits.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace sbp {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view where, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", message));
}

// Printable, bounded rendering of text from the file.
std::string Sanitize(absl::string_view text, size_t limit) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= limit) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrCat("\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

std::string ValueText(const Json& value) {
  return Sanitize(value.dump(-1, ' ', false, Json::error_handler_t::replace), 40);
}

// "[json.exception.parse_error.101] parse error at line 1, column 7: msg" -> "column 7: msg".
std::string JsonErrorText(const std::exception& e) {
  absl::string_view text = e.what();
  if (absl::StartsWith(text, "[json.exception.")) {
    const size_t close = text.find("] ");
    if (close != absl::string_view::npos) text.remove_prefix(close + 2);
  }
  const size_t column = text.find("column ");
  if (absl::StartsWith(text, "parse error at line ") && column != absl::string_view::npos) {
    text.remove_prefix(column);
  }
  return Sanitize(text, 200);
}

// Hint for a line that looks like another objective's data.
std::string FormatHint(const Json& object, absl::string_view expected) {
  absl::string_view looks;
  if (object.contains("completions")) {
    looks = "GRPO";
  } else if (object.contains("chosen_ids") || object.contains("rejected_ids")) {
    looks = "DPO";
  } else if (object.contains("input_ids") || object.contains("completion_ids")) {
    looks = "SFT";
  }
  if (looks.empty() || looks == expected) return "";
  return absl::StrCat(" (this line looks like ", looks, " data, the loader expects ", expected,
                      ")");
}

absl::StatusOr<Json> ParseObject(absl::string_view line, absl::string_view where) {
  if (line.size() > static_cast<size_t>(kMaxJsonlLineBytes)) {
    return Invalid(where, absl::StrCat("line is longer than the ", LimitText(kMaxJsonlLineBytes),
                                       " limit for a JSONL line"));
  }
  // Before parsing: nested values are copied and printed recursively, and a
  // line nested 200,000 levels deep would overflow the stack.
  RETURN_IF_ERROR(CheckJsonNesting(line, kMaxInputNestingDepth, where));
  Json object;
  try {
    object = Json::parse(line.begin(), line.end());
  } catch (const Json::exception& e) {
    return Invalid(where, absl::StrCat("not valid JSON: ", JsonErrorText(e)));
  }
  if (!object.is_object()) {
    return Invalid(where, absl::StrCat("expected a JSON object, got ", object.type_name()));
  }
  return object;
}

// Which ids a list may hold.
enum class IdKind {
  kToken,  // [0, vocab)
  kLabel,  // [0, vocab) or -100
};

// Reads `value` (the field `name`) as a list of token ids.
absl::StatusOr<std::vector<int32_t>> IdList(const Json& value, const std::string& name, IdKind kind,
                                            int64_t vocab_size, absl::string_view where) {
  if (!value.is_array()) {
    return Invalid(where, absl::StrCat("field '", name, "' must be an array of integers, got ",
                                       value.type_name()));
  }
  std::vector<int32_t> out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const Json& v = value[i];
    if (!v.is_number_integer()) {
      return Invalid(where, absl::StrCat(name, "[", i, "] must be an integer, got ", ValueText(v)));
    }
    const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() >= uint64_t{1} << 62;
    const int64_t id = too_big ? std::numeric_limits<int64_t>::max() : v.get<int64_t>();
    if (kind == IdKind::kLabel && id == kIgnoreIndex) {
      out.push_back(kIgnoreIndex);
      continue;
    }
    if (id < 0 || id >= vocab_size) {
      if (kind == IdKind::kLabel) {
        return Invalid(where, absl::StrCat(name, "[", i, "] = ", ValueText(v),
                                           " is neither -100 nor in [0, ", vocab_size, ")"));
      }
      return Invalid(
          where, absl::StrCat(name, "[", i, "] = ", ValueText(v), " is outside the vocabulary [0, ",
                              vocab_size, ")",
                              id == kIgnoreIndex ? " (-100 is only allowed in labels)" : ""));
    }
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> IdField(const Json& object, const std::string& field,
                                             IdKind kind, int64_t vocab_size,
                                             absl::string_view where, bool allow_empty,
                                             absl::string_view hint = "") {
  const auto it = object.find(field);
  if (it == object.end()) {
    return Invalid(where, absl::StrCat("missing field '", field, "'", hint));
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, IdList(*it, field, kind, vocab_size, where));
  if (ids.empty() && !allow_empty) {
    return Invalid(where, absl::StrCat("field '", field, "' is empty"));
  }
  return ids;
}

absl::Status CheckVocab(const DataOptions& options, absl::string_view where) {
  if (options.vocab_size <= 0) {
    return Invalid(where,
                   absl::StrCat("vocab_size must be positive (got ", options.vocab_size, ")"));
  }
  return absl::OkStatus();
}

// The lines of a regular file, one at a time, each at most
// kMaxJsonlLineBytes: memory stays bounded by the longest line, whatever the
// file holds (no newline in 20 GB is refused at the limit).
class LineReader {
 public:
  explicit LineReader(RegularFile file) : file_(std::move(file)) {}

  // The next line without its '\n' in `*line`; false at the end of the file.
  absl::StatusOr<bool> Next(absl::string_view* line) {
    if (start_ > 0 && start_ == pending_.size()) {
      pending_.clear();
      start_ = 0;
      scanned_ = 0;
    }
    while (true) {
      const size_t newline = pending_.find('\n', scanned_);
      if (newline != std::string::npos) {
        RETURN_IF_ERROR(CheckLength(newline - start_));
        *line = absl::string_view(pending_).substr(start_, newline - start_);
        start_ = scanned_ = newline + 1;
        ++number_;
        return true;
      }
      scanned_ = pending_.size();
      RETURN_IF_ERROR(CheckLength(pending_.size() - start_));
      if (eof_) {
        if (start_ == pending_.size()) return false;
        *line = absl::string_view(pending_).substr(start_);
        start_ = scanned_ = pending_.size();
        ++number_;
        return true;
      }
      // Drop consumed lines before reading more.
      if (start_ > 0) {
        pending_.erase(0, start_);
        scanned_ -= start_;
        start_ = 0;
      }
      constexpr size_t kBlock = size_t{1} << 20;
      const size_t used = pending_.size();
      pending_.resize(used + kBlock);
      absl::StatusOr<size_t> got = file_.Read(pending_.data() + used, kBlock);
      if (!got.ok()) {
        return absl::DataLossError(absl::StrCat(file_.path(), ":", number_ + 1, ": read error"));
      }
      pending_.resize(used + *got);
      eof_ = *got == 0;
    }
  }

  int64_t number() const { return number_; }  // of the line last returned

 private:
  absl::Status CheckLength(size_t length) const {
    if (length <= static_cast<size_t>(kMaxJsonlLineBytes)) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(file_.path(), ":", number_ + 1, ": line is longer than the ",
                     LimitText(kMaxJsonlLineBytes), " limit for a JSONL line"));
  }

  RegularFile file_;
  std::string pending_;  // bytes read and not yet returned start at start_
  size_t start_ = 0;
  size_t scanned_ = 0;  // no '\n' in [start_, scanned_)
  bool eof_ = false;
  int64_t number_ = 0;
};

// Reads `path` line by line; `parse` turns one non-blank line into an example.
template <typename T>
absl::StatusOr<std::vector<T>> LoadLines(
    const std::string& path,
    const std::function<absl::StatusOr<T>(absl::string_view, absl::string_view)>& parse) {
  absl::StatusOr<RegularFile> file =
      RegularFile::Open(path, std::numeric_limits<int64_t>::max(), "a data file");
  if (absl::IsNotFound(file.status())) {
    return absl::NotFoundError(absl::StrCat("data file '", path, "' does not exist"));
  }
  if (!file.ok()) return file.status();
  LineReader reader(*std::move(file));
  std::vector<T> out;
  absl::string_view text;
  while (true) {
    ASSIGN_OR_RETURN(bool more, reader.Next(&text));
    if (!more) break;
    if (reader.number() == 1 && absl::StartsWith(text, "\xEF\xBB\xBF")) text.remove_prefix(3);
    if (absl::StripAsciiWhitespace(text).empty()) continue;
    ASSIGN_OR_RETURN(T example, parse(text, absl::StrCat(path, ":", reader.number())));
    out.push_back(std::move(example));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no examples (the file is empty or has only blank lines)"));
  }
  return out;
}

}  // namespace

absl::StatusOr<TokenSequence> PromptResponseSequence(const std::vector<int32_t>& prompt,
                                                     const std::vector<int32_t>& response,
                                                     absl::string_view what,
                                                     const DataOptions& options,
                                                     absl::string_view where) {
  const int64_t total = static_cast<int64_t>(prompt.size() + response.size());
  size_t keep = response.size();
  if (options.seq_len > 0 && total > options.seq_len) {
    if (options.truncation == Truncation::kReject) {
      return Invalid(
          where, absl::StrCat("prompt_ids + ", what, " has ", total, " tokens (", prompt.size(),
                              " + ", response.size(), "), longer than seq_len ", options.seq_len,
                              " (truncation: truncate keeps the first seq_len)"));
    }
    if (static_cast<int64_t>(prompt.size()) >= options.seq_len) {
      return Invalid(where, absl::StrCat("prompt_ids has ", prompt.size(),
                                         " tokens, which leaves no room for ", what,
                                         " within seq_len ", options.seq_len));
    }
    keep = static_cast<size_t>(options.seq_len) - prompt.size();
  }
  TokenSequence s;
  s.input_ids.reserve(prompt.size() + keep);
  s.input_ids = prompt;
  s.input_ids.insert(s.input_ids.end(), response.begin(), response.begin() + keep);
  s.labels.assign(prompt.size(), kIgnoreIndex);
  s.labels.insert(s.labels.end(), response.begin(), response.begin() + keep);
  return s;
}

TokenSequence GrpoSequence(const GrpoGroup& group, size_t index) {
  const GrpoCompletion& completion = group.completions.at(index);
  TokenSequence s;
  s.input_ids = group.prompt;
  s.input_ids.insert(s.input_ids.end(), completion.ids.begin(), completion.ids.end());
  s.labels.assign(group.prompt.size(), kIgnoreIndex);
  s.labels.insert(s.labels.end(), completion.ids.begin(), completion.ids.end());
  return s;
}

absl::StatusOr<TokenSequence> ParseSftLine(absl::string_view line, const DataOptions& options,
                                           absl::string_view where) {
  RETURN_IF_ERROR(CheckVocab(options, where));
  ASSIGN_OR_RETURN(Json object, ParseObject(line, where));
  const int64_t vocab = options.vocab_size;
  const bool prompt_format = object.contains("prompt_ids") || object.contains("completion_ids");
  TokenSequence s;
  if (prompt_format) {
    if (object.contains("input_ids") || object.contains("labels")) {
      return Invalid(
          where, absl::StrCat("has both '", object.contains("input_ids") ? "input_ids" : "labels",
                              "' and prompt_ids/completion_ids; use one format"));
    }
    const std::string hint = FormatHint(object, "SFT");
    ASSIGN_OR_RETURN(std::vector<int32_t> prompt,
                     IdField(object, "prompt_ids", IdKind::kToken, vocab, where, false, hint));
    ASSIGN_OR_RETURN(std::vector<int32_t> completion,
                     IdField(object, "completion_ids", IdKind::kToken, vocab, where, false, hint));
    ASSIGN_OR_RETURN(s,
                     PromptResponseSequence(prompt, completion, "completion_ids", options, where));
  } else {
    ASSIGN_OR_RETURN(s.input_ids, IdField(object, "input_ids", IdKind::kToken, vocab, where, false,
                                          FormatHint(object, "SFT")));
    if (object.contains("labels")) {
      ASSIGN_OR_RETURN(s.labels, IdField(object, "labels", IdKind::kLabel, vocab, where, false));
      if (s.labels.size() != s.input_ids.size()) {
        return Invalid(where, absl::StrCat("field 'labels' has ", s.labels.size(),
                                           " entries but 'input_ids' has ", s.input_ids.size()));
      }
    } else {
      s.labels = s.input_ids;
    }
    const int64_t n = static_cast<int64_t>(s.input_ids.size());
    if (options.seq_len > 0 && n > options.seq_len) {
      if (options.truncation == Truncation::kReject) {
        return Invalid(where, absl::StrCat("input_ids has ", n, " tokens, longer than seq_len ",
                                           options.seq_len,
                                           " (truncation: truncate keeps the first seq_len)"));
      }
      s.input_ids.resize(options.seq_len);
      s.labels.resize(options.seq_len);
    }
  }
  RETURN_IF_ERROR(ValidateSequence(s, vocab, where));
  return s;
}

absl::StatusOr<DpoPair> ParseDpoLine(absl::string_view line, const DataOptions& options,
                                     absl::string_view where) {
  RETURN_IF_ERROR(CheckVocab(options, where));
  ASSIGN_OR_RETURN(Json object, ParseObject(line, where));
  const int64_t vocab = options.vocab_size;
  const std::string hint = FormatHint(object, "DPO");
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt,
                   IdField(object, "prompt_ids", IdKind::kToken, vocab, where, false, hint));
  ASSIGN_OR_RETURN(std::vector<int32_t> chosen,
                   IdField(object, "chosen_ids", IdKind::kToken, vocab, where, false, hint));
  ASSIGN_OR_RETURN(std::vector<int32_t> rejected,
                   IdField(object, "rejected_ids", IdKind::kToken, vocab, where, false, hint));
  DpoPair pair;
  ASSIGN_OR_RETURN(pair.chosen,
                   PromptResponseSequence(prompt, chosen, "chosen_ids", options, where));
  ASSIGN_OR_RETURN(pair.rejected,
                   PromptResponseSequence(prompt, rejected, "rejected_ids", options, where));
  return pair;
}

absl::StatusOr<GrpoGroup> ParseGrpoLine(absl::string_view line, const DataOptions& options,
                                        absl::string_view where) {
  RETURN_IF_ERROR(CheckVocab(options, where));
  ASSIGN_OR_RETURN(Json object, ParseObject(line, where));
  const int64_t vocab = options.vocab_size;
  const std::string hint = FormatHint(object, "GRPO");
  GrpoGroup group;
  ASSIGN_OR_RETURN(group.prompt,
                   IdField(object, "prompt_ids", IdKind::kToken, vocab, where, false, hint));
  const auto it = object.find("completions");
  if (it == object.end()) {
    return Invalid(where, absl::StrCat("missing field 'completions'", hint));
  }
  if (!it->is_array() || it->empty()) {
    return Invalid(where, absl::StrCat("field 'completions' must be a non-empty array of "
                                       "objects, got ",
                                       it->is_array() ? "an empty array" : it->type_name()));
  }
  const int64_t prompt_len = static_cast<int64_t>(group.prompt.size());
  if (options.seq_len > 0 && prompt_len >= options.seq_len) {
    return Invalid(where, absl::StrCat("prompt_ids has ", prompt_len,
                                       " tokens, which leaves no room for completions within "
                                       "seq_len ",
                                       options.seq_len));
  }
  for (size_t c = 0; c < it->size(); ++c) {
    const Json& item = (*it)[c];
    const std::string name = absl::StrCat("completions[", c, "]");
    if (!item.is_object()) {
      return Invalid(where,
                     absl::StrCat("field '", name, "' must be an object, got ", item.type_name()));
    }
    GrpoCompletion completion;
    const auto ids = item.find("ids");
    if (ids == item.end()) return Invalid(where, absl::StrCat(name, ": missing field 'ids'"));
    ASSIGN_OR_RETURN(completion.ids,
                     IdList(*ids, absl::StrCat(name, ".ids"), IdKind::kToken, vocab, where));
    if (completion.ids.empty()) {
      return Invalid(where, absl::StrCat("field '", name, ".ids' is empty"));
    }
    const auto reward = item.find("reward");
    if (reward == item.end()) {
      return Invalid(where, absl::StrCat(name, ": missing field 'reward'"));
    }
    if (!reward->is_number()) {
      return Invalid(where, absl::StrCat("field '", name, ".reward' must be a number, got ",
                                         reward->type_name()));
    }
    completion.reward = reward->get<double>();
    if (!std::isfinite(completion.reward)) {
      return Invalid(
          where, absl::StrCat(name, ".reward = ", ValueText(*reward), " is not a finite number"));
    }
    const auto old = item.find("old_logprobs");
    if (old != item.end()) {
      const std::string old_name = absl::StrCat(name, ".old_logprobs");
      if (!old->is_array()) {
        return Invalid(where, absl::StrCat("field '", old_name,
                                           "' must be an array of numbers, "
                                           "got ",
                                           old->type_name()));
      }
      if (old->size() != completion.ids.size()) {
        return Invalid(
            where, absl::StrCat("field '", old_name, "' has ", old->size(), " entries but '", name,
                                ".ids' has ", completion.ids.size()));
      }
      completion.old_logprobs.reserve(old->size());
      for (size_t i = 0; i < old->size(); ++i) {
        const Json& v = (*old)[i];
        if (!v.is_number()) {
          return Invalid(where,
                         absl::StrCat(old_name, "[", i, "] must be a number, got ", ValueText(v)));
        }
        const double logprob = v.get<double>();
        if (!std::isfinite(logprob) || logprob > kMaxOldLogprob) {
          return Invalid(where, absl::StrCat(old_name, "[", i, "] = ", ValueText(v),
                                             " is not a log-probability (finite, <= 0)"));
        }
        completion.old_logprobs.push_back(static_cast<float>(logprob));
      }
    }
    const int64_t total = prompt_len + static_cast<int64_t>(completion.ids.size());
    if (options.seq_len > 0 && total > options.seq_len) {
      if (options.truncation == Truncation::kReject) {
        return Invalid(where, absl::StrCat("prompt_ids + ", name, ".ids has ", total, " tokens (",
                                           prompt_len, " + ", completion.ids.size(),
                                           "), longer than seq_len ", options.seq_len,
                                           " (truncation: truncate keeps the first seq_len)"));
      }
      const size_t keep = static_cast<size_t>(options.seq_len - prompt_len);
      completion.ids.resize(keep);
      if (!completion.old_logprobs.empty()) completion.old_logprobs.resize(keep);
    }
    group.completions.push_back(std::move(completion));
  }
  return group;
}

absl::StatusOr<std::vector<TokenSequence>> LoadSftJsonl(const std::string& path,
                                                        const DataOptions& options) {
  ASSIGN_OR_RETURN(
      std::vector<TokenSequence> sequences,
      LoadLines<TokenSequence>(path, [&](absl::string_view line, absl::string_view where) {
        return ParseSftLine(line, options, where);
      }));
  // A line without targets is fine (it adds nothing to the loss), a file
  // without any is not: its loss would be 0/0.
  if (CountValidTargets(sequences) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": no token has a loss (every label after the first position of every line is "
                     "-100)"));
  }
  return sequences;
}

absl::StatusOr<std::vector<DpoPair>> LoadDpoJsonl(const std::string& path,
                                                  const DataOptions& options) {
  return LoadLines<DpoPair>(path, [&](absl::string_view line, absl::string_view where) {
    return ParseDpoLine(line, options, where);
  });
}

absl::StatusOr<RolloutPrompt> ParsePromptLine(absl::string_view line, const DataOptions& options,
                                              int64_t max_new_tokens, absl::string_view where) {
  RETURN_IF_ERROR(CheckVocab(options, where));
  ASSIGN_OR_RETURN(Json object, ParseObject(line, where));
  RolloutPrompt out;
  ASSIGN_OR_RETURN(out.prompt,
                   IdField(object, "prompt_ids", IdKind::kToken, options.vocab_size, where, false,
                           " (online GRPO reads prompts: {\"prompt_ids\": [...], ...}; "
                           "`sbp data prepare --format prompt` writes them)"));
  const int64_t length = static_cast<int64_t>(out.prompt.size());
  if (options.seq_len > 0 && length + max_new_tokens > options.seq_len) {
    return Invalid(where, absl::StrCat("prompt_ids has ", length, " tokens; with ", max_new_tokens,
                                       " new tokens (grpo.rollout.max_new_tokens) that is over "
                                       "seq_len ",
                                       options.seq_len, " (at most ",
                                       options.seq_len - max_new_tokens, " prompt tokens)"));
  }
  object.erase("prompt_ids");
  out.fields = std::move(object);
  return out;
}

absl::StatusOr<std::vector<RolloutPrompt>> LoadPromptJsonl(const std::string& path,
                                                           const DataOptions& options,
                                                           int64_t max_new_tokens) {
  return LoadLines<RolloutPrompt>(path, [&](absl::string_view line, absl::string_view where) {
    return ParsePromptLine(line, options, max_new_tokens, where);
  });
}

absl::StatusOr<std::vector<GrpoGroup>> LoadGrpoJsonl(const std::string& path,
                                                     const DataOptions& options) {
  return LoadLines<GrpoGroup>(path, [&](absl::string_view line, absl::string_view where) {
    return ParseGrpoLine(line, options, where);
  });
}

absl::StatusOr<TokenSequence> ParseSftLine(absl::string_view line, int64_t vocab_size,
                                           absl::string_view where) {
  return ParseSftLine(line, DataOptions{vocab_size, 0, Truncation::kReject}, where);
}

absl::StatusOr<std::vector<TokenSequence>> LoadSftJsonl(const std::string& path,
                                                        int64_t vocab_size) {
  return LoadSftJsonl(path, DataOptions{vocab_size, 0, Truncation::kReject});
}

}  // namespace sbp
