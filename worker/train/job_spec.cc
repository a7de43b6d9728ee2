#include "worker/train/job_spec.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <filesystem>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/byte_size.h"
#include "common/input_limits.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/engine/lora_store.h"

namespace sbp {

absl::string_view ObjectiveName(Objective objective) {
  switch (objective) {
    case Objective::kSft:
      return "sft";
    case Objective::kDpo:
      return "dpo";
    case Objective::kGrpo:
      return "grpo";
  }
  return "?";
}

absl::string_view LrScheduleName(LrSchedule schedule) {
  switch (schedule) {
    case LrSchedule::kConstant:
      return "constant";
    case LrSchedule::kLinear:
      return "linear";
    case LrSchedule::kCosine:
      return "cosine";
  }
  return "?";
}

absl::string_view PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

absl::string_view GrpoLossName(GrpoLoss loss) {
  switch (loss) {
    case GrpoLoss::kGrpo:
      return "grpo";
    case GrpoLoss::kBnpo:
      return "bnpo";
    case GrpoLoss::kDrGrpo:
      return "dr_grpo";
  }
  return "?";
}

absl::string_view TruncationName(Truncation truncation) {
  switch (truncation) {
    case Truncation::kReject:
      return "reject";
    case Truncation::kTruncate:
      return "truncate";
  }
  return "?";
}

namespace {

using Json = nlohmann::json;

constexpr size_t kMaxNameLength = 100;

// ---------------------------------------------------------------------------
// Scalars.

std::optional<int64_t> ParseIntText(absl::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::optional<double> ParseNumberText(absl::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty() || text.front() == '+') return std::nullopt;
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value, std::chars_format::general);
  if (ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<bool> ParseBoolText(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "no" || lower == "off") return false;
  return std::nullopt;
}

// Shortest text that reads back as the same double.
std::string FormatDouble(double value) {
  char buffer[64];
  auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (ec != std::errc()) return absl::StrCat(value);
  return std::string(buffer, ptr);
}

// A byte count in the largest binary unit that divides it exactly.
std::string FormatExactByteSize(int64_t bytes) {
  static constexpr std::pair<int64_t, const char*> kUnits[] = {{int64_t{1} << 40, "TiB"},
                                                               {int64_t{1} << 30, "GiB"},
                                                               {int64_t{1} << 20, "MiB"},
                                                               {int64_t{1} << 10, "KiB"}};
  for (const auto& [unit, suffix] : kUnits) {
    if (bytes > 0 && bytes % unit == 0) return absl::StrCat(bytes / unit, suffix);
  }
  return absl::StrCat(bytes);
}

// Printable, bounded rendering of user text for messages.
std::string Sanitize(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size() && out.size() < 60; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += absl::StrCat("\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  if (text.size() > 60) out += "...";
  return out;
}

// "(got ...)": numbers and booleans raw, other text quoted.
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "null";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      break;
  }
  const std::string& text = node.Scalar();
  if (ParseNumberText(text) || ParseBoolText(text)) return Sanitize(text);
  return absl::StrCat("'", Sanitize(text), "'");
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  // Optimal string alignment: insertions, deletions, substitutions and
  // transpositions of neighbours each cost 1.
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// ---------------------------------------------------------------------------
// The schema: allowed keys per block.

const std::vector<absl::string_view>& TopKeys() {
  static const auto* keys = new std::vector<absl::string_view>{
      "name",         "model",    "data", "objective", "seq_len",   "truncation", "log_every_steps",
      "streambp",     "train",    "dpo",  "grpo",      "resources", "checkpoint", "resume_from",
      "max_restarts", "priority", "lora", "eval"};
  return *keys;
}

const std::vector<std::pair<absl::string_view, std::vector<absl::string_view>>>& BlockKeys() {
  static const auto* blocks =
      new std::vector<std::pair<absl::string_view, std::vector<absl::string_view>>>{
          {"data", {"path", "packing"}},
          {"streambp", {"mode", "chunk_tokens", "logits_chunk_tokens", "offload"}},
          {"streambp.offload", {"checkpoints", "disk_dir"}},
          {"train",
           {"steps", "sequences_per_step", "micro_batch_sequences", "lr", "schedule",
            "warmup_steps", "min_lr_ratio", "weight_decay", "beta1", "beta2", "betas", "eps",
            "max_grad_norm", "seed", "precision", "epochs", "shuffle", "optimizer_offload",
            "zero_stage"}},
          {"dpo", {"beta", "reference"}},
          {"grpo", {"beta", "epsilon", "loss", "reference", "rollout", "reward"}},
          {"grpo.rollout",
           {"group_size", "max_new_tokens", "temperature", "top_p", "top_k", "eos_token_id", "stop",
            "tokenizer"}},
          {"grpo.reward",
           {"function", "reference_field", "pattern", "command", "timeout_s",
            "length_penalty_buffer", "length_penalty_weight"}},
          {"resources", {"world_size", "sequence_parallel", "device", "memory"}},
          {"checkpoint", {"every_steps", "dir", "keep_last"}},
          {"lora", {"r", "alpha", "target_modules", "rslora", "init_seed", "dropout"}},
          {"eval", {"data", "every_steps", "max_examples"}},
      };
  return *blocks;
}

const std::vector<absl::string_view>& KeysOf(absl::string_view block) {
  for (const auto& [name, keys] : BlockKeys()) {
    if (name == block) return keys;
  }
  return TopKeys();
}

// ---------------------------------------------------------------------------
// Reading a validated document.

class Reader {
 public:
  explicit Reader(absl::string_view source) : source_(source) {}

  absl::Status Error(absl::string_view path, absl::string_view reason) const {
    std::string prefix = source_.empty() ? "" : absl::StrCat(source_, ": ");
    if (!path.empty()) absl::StrAppend(&prefix, path, ": ");
    return absl::InvalidArgumentError(absl::StrCat(prefix, reason));
  }

  absl::Status Got(absl::string_view path, absl::string_view requirement,
                   const YAML::Node& node) const {
    return Error(path, absl::StrCat(requirement, " (got ", Describe(node), ")"));
  }

 private:
  std::string source_;
};

// One mapping level: keys checked against the schema, duplicates rejected.
class Block {
 public:
  static absl::StatusOr<Block> Make(const Reader& reader, const YAML::Node& node,
                                    absl::string_view path) {
    Block block;
    block.path_ = std::string(path);
    if (node.IsNull() || !node.IsDefined()) return block;
    if (!node.IsMap()) {
      return reader.Got(
          path, path.empty() ? "the job spec must be a mapping of fields" : "must be a mapping",
          node);
    }
    const std::vector<absl::string_view>& allowed = KeysOf(path);
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node key = it->first;
      if (!key.IsScalar()) return reader.Got(path, "keys must be plain names", key);
      const std::string& name = key.Scalar();
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        return reader.Error(path, UnknownKeyMessage(name, path));
      }
      for (const auto& [seen, unused] : block.entries_) {
        if (seen == name) return reader.Error(path, absl::StrCat("duplicate key '", name, "'"));
      }
      block.entries_.emplace_back(name, it->second);
    }
    return block;
  }

  // The value of `key`, or a Null node when it is absent or null.
  YAML::Node Get(absl::string_view key) const {
    for (const auto& [name, value] : entries_) {
      if (name == key) return value;
    }
    return YAML::Node();
  }
  bool Has(absl::string_view key) const { return !Get(key).IsNull(); }
  std::string Path(absl::string_view key) const {
    return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
  }

 private:
  static std::string UnknownKeyMessage(const std::string& name, absl::string_view path) {
    std::string message = absl::StrCat("unknown key '", Sanitize(name), "'");
    const std::vector<absl::string_view>& allowed = KeysOf(path);
    absl::string_view best;
    size_t best_distance = 3;
    for (absl::string_view candidate : allowed) {
      const size_t d = EditDistance(name, candidate);
      if (d < best_distance && d < name.size()) {
        best = candidate;
        best_distance = d;
      }
    }
    if (!best.empty()) return absl::StrCat(message, " (did you mean '", best, "'?)");
    // A field of another block written at this level ("lr" at the top).
    for (const auto& [block, keys] : BlockKeys()) {
      if (block == path) continue;
      if (std::find(keys.begin(), keys.end(), name) != keys.end()) {
        return absl::StrCat(message, " (did you mean '", block, ".", name, "'?)");
      }
    }
    if (!path.empty() && std::find(TopKeys().begin(), TopKeys().end(), name) != TopKeys().end()) {
      return absl::StrCat(message, " ('", name, "' belongs at the top level)");
    }
    return absl::StrCat(message, " (expected one of ", absl::StrJoin(allowed, ", "), ")");
  }

  std::string path_;
  std::vector<std::pair<std::string, YAML::Node>> entries_;
};

// Field readers: each leaves `out` unchanged when the key is absent or null.

// Digits with an optional sign: an integer, possibly outside int64.
bool LooksLikeInteger(absl::string_view text) {
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) text.remove_prefix(1);
  return !text.empty() && std::all_of(text.begin(), text.end(), absl::ascii_isdigit);
}

// An integer in [min, max]; `requirement` names the lower bound ("must be a
// positive integer"); above `max` reads "must be at most <max>".
absl::Status ReadInt(const Reader& r, const Block& b, absl::string_view key, int64_t min,
                     int64_t max, absl::string_view requirement, int64_t& out) {
  const YAML::Node node = b.Get(key);
  if (node.IsNull()) return absl::OkStatus();
  std::optional<int64_t> value;
  if (node.IsScalar()) value = ParseIntText(node.Scalar());
  if (!value) {
    if (node.IsScalar() && LooksLikeInteger(node.Scalar())) {  // beyond int64
      return r.Got(b.Path(key),
                   node.Scalar().front() == '-' ? std::string(requirement)
                                                : absl::StrCat("must be at most ", max),
                   node);
    }
    return r.Got(b.Path(key), "must be an integer", node);
  }
  if (*value < min) return r.Got(b.Path(key), requirement, node);
  if (*value > max) return r.Got(b.Path(key), absl::StrCat("must be at most ", max), node);
  out = *value;
  return absl::OkStatus();
}

absl::Status ReadPositiveInt(const Reader& r, const Block& b, absl::string_view key, int64_t max,
                             int64_t& out) {
  return ReadInt(r, b, key, 1, max, "must be a positive integer", out);
}

absl::Status ReadNonNegativeInt(const Reader& r, const Block& b, absl::string_view key, int64_t max,
                                int64_t& out) {
  return ReadInt(r, b, key, 0, max, "must be a non-negative integer", out);
}

// `ok(value)` decides the range; `requirement` names it ("must be a positive number").
template <typename Pred>
absl::Status ReadNumberNode(const Reader& r, const YAML::Node& node, const std::string& path,
                            Pred ok, absl::string_view requirement, double& out) {
  std::optional<double> value;
  if (node.IsScalar()) value = ParseNumberText(node.Scalar());
  if (!value) return r.Got(path, "must be a number", node);
  if (!ok(*value)) return r.Got(path, requirement, node);
  out = *value;
  return absl::OkStatus();
}

template <typename Pred>
absl::Status ReadNumber(const Reader& r, const Block& b, absl::string_view key, Pred ok,
                        absl::string_view requirement, double& out) {
  const YAML::Node node = b.Get(key);
  if (node.IsNull()) return absl::OkStatus();
  return ReadNumberNode(r, node, b.Path(key), ok, requirement, out);
}

absl::Status ReadBool(const Reader& r, const Block& b, absl::string_view key, bool& out) {
  const YAML::Node node = b.Get(key);
  if (node.IsNull()) return absl::OkStatus();
  std::optional<bool> value;
  if (node.IsScalar()) value = ParseBoolText(node.Scalar());
  if (!value) return r.Got(b.Path(key), "must be true or false", node);
  out = *value;
  return absl::OkStatus();
}

// Well-formed UTF-8: no stray continuation bytes, overlong forms, surrogates
// or code points past U+10FFFF.
bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    size_t length;
    uint32_t code;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      length = 2;
      code = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      length = 3;
      code = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      length = 4;
      code = c & 0x07;
    } else {
      return false;
    }
    if (i + length > text.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    static constexpr uint32_t kMinimum[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kMinimum[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) {
      return false;
    }
    i += length;
  }
  return true;
}

// The offset of the first control byte of `text` other than NUL (which
// paths report on their own), if any.
std::optional<size_t> ControlByteOffset(absl::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c != 0 && (c < 0x20 || c == 0x7f)) return i;
  }
  return std::nullopt;
}

absl::Status ReadString(const Reader& r, const Block& b, absl::string_view key, std::string& out) {
  const YAML::Node node = b.Get(key);
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsScalar()) return r.Got(b.Path(key), "must be a string", node);
  if (absl::StripAsciiWhitespace(node.Scalar()).empty()) {
    return r.Error(b.Path(key), "must not be empty");
  }
  // The stored JSON form could not hold other bytes unchanged.
  if (!IsValidUtf8(node.Scalar())) return r.Got(b.Path(key), "must be valid UTF-8 text", node);
  // A raw line break or other control byte does not survive the YAML form
  // (a plain scalar loses a trailing CR), and no name or path needs one.
  // NUL is left to ReadPath, which says why a path cannot hold it.
  if (const std::optional<size_t> at = ControlByteOffset(node.Scalar())) {
    const unsigned char c = static_cast<unsigned char>(node.Scalar()[*at]);
    return r.Error(b.Path(key),
                   absl::StrCat("must not hold control characters (byte 0x",
                                absl::Hex(c, absl::kZeroPad2), " at offset ", *at, ")"));
  }
  out = node.Scalar();
  return absl::OkStatus();
}

// A file system path: a string (ReadString) whose components fit the file
// system's limits (NAME_MAX 255 bytes each, PATH_MAX 4096 in all) and hold
// no NUL byte, so that a path no system call can take is bad input here,
// naming the field, and not a storage error (retried) when the run opens it.
absl::Status ReadPath(const Reader& r, const Block& b, absl::string_view key, std::string& out) {
  RETURN_IF_ERROR(ReadString(r, b, key, out));
  if (out.find('\0') != std::string::npos) {
    return r.Error(b.Path(key), "must not hold a NUL byte");
  }
  if (out.size() >= 4096) {
    return r.Error(b.Path(key),
                   absl::StrCat("is ", out.size(), " bytes long; a path is at most 4095 bytes"));
  }
  for (absl::string_view part : absl::StrSplit(out, '/')) {
    if (part.size() > 255) {
      return r.Error(b.Path(key),
                     absl::StrCat("has a component of ", part.size(), " bytes ('",
                                  part.substr(0, 16), "...'); a file name is at most 255 bytes"));
    }
  }
  return absl::OkStatus();
}

template <typename Enum>
absl::Status ReadEnum(const Reader& r, const Block& b, absl::string_view key,
                      const std::vector<std::pair<absl::string_view, Enum>>& options, Enum& out) {
  const YAML::Node node = b.Get(key);
  if (node.IsNull()) return absl::OkStatus();
  if (node.IsScalar()) {
    for (const auto& [name, value] : options) {
      if (node.Scalar() == name) {
        out = value;
        return absl::OkStatus();
      }
    }
  }
  std::vector<absl::string_view> names;
  for (const auto& option : options) names.push_back(option.first);
  return r.Got(b.Path(key), absl::StrCat("must be one of ", absl::StrJoin(names, ", ")), node);
}

// `auto` -> 0, or a positive integer.
absl::Status ReadChunk(const Reader& r, const Block& b, absl::string_view key, int64_t& out) {
  const YAML::Node node = b.Get(key);
  if (node.IsNull()) return absl::OkStatus();
  if (node.IsScalar()) {
    if (node.Scalar() == "auto") {
      out = 0;
      return absl::OkStatus();
    }
    std::optional<int64_t> value = ParseIntText(node.Scalar());
    if (value && *value > 0 && *value <= kMaxSpecSeqLen) {
      out = *value;
      return absl::OkStatus();
    }
    if ((value && *value > kMaxSpecSeqLen) ||
        (!value && LooksLikeInteger(node.Scalar()) && node.Scalar().front() != '-')) {
      return r.Got(b.Path(key), absl::StrCat("must be at most ", kMaxSpecSeqLen), node);
    }
  }
  return r.Got(b.Path(key), "must be 'auto' or a positive integer", node);
}

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength || !absl::ascii_isalnum(name[0])) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

absl::Status Required(const Reader& r, const Block& top, absl::string_view key) {
  if (top.Has(key)) return absl::OkStatus();
  return r.Error("", absl::StrCat("missing required field '", key, "'"));
}

// `data:` a file name, or {path: FILE, packing: BOOL} (packing: SFT only).
absl::Status ReadData(const Reader& r, const Block& top, JobSpec& s) {
  if (!top.Get("data").IsMap()) return ReadPath(r, top, "data", s.data);
  ASSIGN_OR_RETURN(Block db, Block::Make(r, top.Get("data"), "data"));
  if (!db.Has("path")) return r.Error("data", "missing required field 'path' (the token file)");
  RETURN_IF_ERROR(ReadPath(r, db, "path", s.data));
  RETURN_IF_ERROR(ReadBool(r, db, "packing", s.data_packing));
  if (s.data_packing && s.objective != Objective::kSft) {
    return r.Error("data.packing", absl::StrCat("packs SFT examples; objective ",
                                                ObjectiveName(s.objective), " has no packing"));
  }
  return absl::OkStatus();
}

auto Positive = [](double v) { return v > 0; };
auto NonNegative = [](double v) { return v >= 0; };
auto UnitOpen = [](double v) { return v >= 0 && v < 1; };
auto UnitClosed = [](double v) { return v >= 0 && v <= 1; };

// A token id: an integer in [0, kMaxSpecTokenId].
constexpr int64_t kMaxSpecTokenId = (int64_t{1} << 31) - 1;

absl::StatusOr<int64_t> TokenIdNode(const Reader& r, const YAML::Node& node,
                                    const std::string& path) {
  std::optional<int64_t> value;
  if (node.IsScalar()) value = ParseIntText(node.Scalar());
  if (!value || *value < 0 || *value > kMaxSpecTokenId) {
    return r.Got(path, "must be a token id (an integer >= 0)", node);
  }
  return *value;
}

// A list of token ids (at most `max` of them, at least one).
absl::Status ReadTokenList(const Reader& r, const YAML::Node& node, const std::string& path,
                           size_t max, std::vector<int64_t>& out) {
  if (!node.IsSequence() || node.size() == 0 || node.size() > max) {
    return r.Got(path, absl::StrCat("must be a list of 1 to ", max, " token ids"), node);
  }
  out.clear();
  for (const YAML::Node& item : node) {
    ASSIGN_OR_RETURN(const int64_t id, TokenIdNode(r, item, path));
    out.push_back(id);
  }
  return absl::OkStatus();
}

// grpo.rollout: online sampling. group_size is required (it turns it on).
absl::Status ReadRollout(const Reader& r, const Block& b, int64_t seq_len, RolloutSpec& out) {
  if (!b.Has("group_size")) {
    return r.Error("grpo.rollout",
                   "missing required field 'group_size' (completions sampled per prompt)");
  }
  RETURN_IF_ERROR(ReadInt(r, b, "group_size", 2, 4096,
                          "must be at least 2 (advantages compare a group's completions)",
                          out.group_size));
  RETURN_IF_ERROR(ReadPositiveInt(r, b, "max_new_tokens", kMaxSpecSeqLen, out.max_new_tokens));
  if (out.max_new_tokens >= seq_len) {
    return r.Got(
        b.Path("max_new_tokens"),
        absl::StrCat("must be below seq_len (", seq_len,
                     "): a prompt and its completion are trained as one sequence"),
        b.Has("max_new_tokens") ? b.Get("max_new_tokens") : YAML::Node(out.max_new_tokens));
  }
  RETURN_IF_ERROR(ReadNumber(
      r, b, "temperature", [](double v) { return v >= 0 && v <= 100; },
      "must be a number in [0, 100] (0: greedy)", out.temperature));
  RETURN_IF_ERROR(ReadNumber(
      r, b, "top_p", [](double v) { return v > 0 && v <= 1; }, "must be in (0, 1] (1: off)",
      out.top_p));
  RETURN_IF_ERROR(ReadNonNegativeInt(r, b, "top_k", kMaxSpecTokenId, out.top_k));
  if (b.Has("eos_token_id")) {
    const YAML::Node node = b.Get("eos_token_id");
    out.eos_from_config = false;
    if (node.IsSequence()) {
      RETURN_IF_ERROR(ReadTokenList(r, node, b.Path("eos_token_id"), 64, out.eos_token_ids));
    } else {
      ASSIGN_OR_RETURN(const int64_t id, TokenIdNode(r, node, b.Path("eos_token_id")));
      out.eos_token_ids = {id};
    }
  }
  if (b.Has("stop")) {
    const YAML::Node list = b.Get("stop");
    if (!list.IsSequence() || list.size() > 64) {
      return r.Got(b.Path("stop"), "must be a list of at most 64 token-id lists", list);
    }
    for (const YAML::Node& item : list) {
      std::vector<int64_t> ids;
      RETURN_IF_ERROR(ReadTokenList(r, item, b.Path("stop"), 256, ids));
      out.stop.push_back(std::move(ids));
    }
  }
  RETURN_IF_ERROR(ReadPath(r, b, "tokenizer", out.tokenizer));
  return absl::OkStatus();
}

// grpo.reward: a built-in function or a program (exactly one).
absl::Status ReadReward(const Reader& r, const Block& b, RewardSpec& out) {
  RETURN_IF_ERROR(ReadEnum<std::string>(r, b, "function",
                                        {{"math_answer", "math_answer"},
                                         {"exact_match", "exact_match"},
                                         {"token_match", "token_match"},
                                         {"regex", "regex"}},
                                        out.function));
  RETURN_IF_ERROR(ReadString(r, b, "reference_field", out.reference_field));
  RETURN_IF_ERROR(ReadString(r, b, "pattern", out.pattern));
  if (b.Has("command")) {
    const YAML::Node list = b.Get("command");
    if (!list.IsSequence() || list.size() == 0 || list.size() > 256) {
      return r.Got(b.Path("command"),
                   "must be a list: the program and its arguments, e.g. [python3, reward.py]",
                   list);
    }
    for (const YAML::Node& item : list) {
      if (!item.IsScalar() || item.Scalar().empty() || item.Scalar().size() > 4095 ||
          item.Scalar().find('\0') != std::string::npos ||
          ControlByteOffset(item.Scalar()).has_value() || !IsValidUtf8(item.Scalar())) {
        return r.Got(b.Path("command"),
                     "must list non-empty text arguments (no control characters)", item);
      }
      out.command.push_back(item.Scalar());
    }
  }
  if (out.function.empty() == out.command.empty()) {
    return r.Error("grpo.reward",
                   out.function.empty()
                       ? "needs 'function' (math_answer, exact_match, token_match, regex) or "
                         "'command' (a reward program)"
                       : "takes 'function' or 'command', not both");
  }
  if (out.function == "regex" && out.pattern.empty()) {
    return r.Error("grpo.reward", "function regex needs 'pattern'");
  }
  if (out.function != "regex" && !out.pattern.empty()) {
    return r.Error("grpo.reward.pattern", "is only read by function regex");
  }
  RETURN_IF_ERROR(ReadNumber(
      r, b, "timeout_s", [](double v) { return v > 0 && v <= 86400; },
      "must be a number of seconds in (0, 86400]", out.timeout_s));
  RETURN_IF_ERROR(
      ReadNonNegativeInt(r, b, "length_penalty_buffer", kMaxSpecSeqLen, out.length_penalty_buffer));
  RETURN_IF_ERROR(ReadNumber(r, b, "length_penalty_weight", NonNegative,
                             "must be a non-negative number", out.length_penalty_weight));
  return absl::OkStatus();
}

// The eval block: data required; the validation loss is the SFT loss.
absl::Status ReadEval(const Reader& r, const Block& eb, Objective objective, EvalSpec& eval) {
  if (!eb.Has("data")) {
    return r.Error("eval", "missing required field 'data' (the validation token file)");
  }
  RETURN_IF_ERROR(ReadPath(r, eb, "data", eval.data));
  if (eval.data.empty()) return r.Error(eb.Path("data"), "must name a file");
  if (objective != Objective::kSft) {
    return r.Error("eval", absl::StrCat("the validation loss is the causal-LM loss of SFT data; "
                                        "objective ",
                                        ObjectiveName(objective), " has no eval"));
  }
  RETURN_IF_ERROR(ReadNonNegativeInt(r, eb, "every_steps", kMaxSpecSteps, eval.every_steps));
  return ReadNonNegativeInt(r, eb, "max_examples", INT64_MAX, eval.max_examples);
}

// The lora block: r required; alpha defaults to r, target_modules to every
// module (in canonical order whatever order they are given in).
absl::Status ReadLora(const Reader& r, const Block& lb, LoraOptions& lora) {
  if (!lb.Has("r")) return r.Error("lora", "missing required field 'r' (the adapter rank)");
  RETURN_IF_ERROR(ReadPositiveInt(r, lb, "r", kMaxSpecLoraRank, lora.r));
  lora.alpha = static_cast<double>(lora.r);
  RETURN_IF_ERROR(ReadNumber(r, lb, "alpha", Positive, "must be a positive number", lora.alpha));
  RETURN_IF_ERROR(ReadBool(r, lb, "rslora", lora.rslora));
  int64_t seed = 0;
  RETURN_IF_ERROR(ReadNonNegativeInt(r, lb, "init_seed", INT64_MAX, seed));
  lora.init_seed = static_cast<uint64_t>(seed);
  RETURN_IF_ERROR(ReadNumber(r, lb, "dropout", NonNegative, "must be 0", lora.dropout));
  std::vector<std::string> modules = LoraModuleNames();
  if (lb.Has("target_modules")) {
    const YAML::Node list = lb.Get("target_modules");
    if (!list.IsSequence() || list.size() == 0 || list.size() > 64) {
      return r.Got(lb.Path("target_modules"),
                   "must be a list of module names such as [q_proj, v_proj]", list);
    }
    modules.clear();
    for (const YAML::Node& item : list) {
      if (!item.IsScalar()) {
        return r.Got(lb.Path("target_modules"), "must list module names", item);
      }
      if (std::find(modules.begin(), modules.end(), item.Scalar()) != modules.end()) {
        return r.Error(lb.Path("target_modules"),
                       absl::StrCat("'", Sanitize(item.Scalar()), "' is listed twice"));
      }
      modules.push_back(Sanitize(item.Scalar()));
    }
  }
  lora.target_modules = modules;
  const absl::Status valid = ValidateLoraOptions(lora);
  if (!valid.ok()) return r.Error("", valid.message());
  lora.target_modules.clear();
  for (const std::string& m : LoraModuleNames()) {
    if (std::find(modules.begin(), modules.end(), m) != modules.end()) {
      lora.target_modules.push_back(m);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<JobSpec> ReadSpec(const Reader& r, const YAML::Node& root) {
  if (root.IsNull() || !root.IsDefined()) return r.Error("", "the job spec is empty");
  ASSIGN_OR_RETURN(Block top, Block::Make(r, root, ""));
  JobSpec s;
  for (absl::string_view key : {"name", "model", "data", "objective", "seq_len"}) {
    RETURN_IF_ERROR(Required(r, top, key));
  }
  RETURN_IF_ERROR(ReadString(r, top, "name", s.name));
  if (!ValidName(s.name)) {
    return r.Got("name",
                 absl::StrCat("must start with a letter or digit, use only letters, digits, "
                              "'.', '_' and '-', and have at most ",
                              kMaxNameLength, " characters"),
                 top.Get("name"));
  }
  RETURN_IF_ERROR(ReadPath(r, top, "model", s.model));
  RETURN_IF_ERROR(ReadEnum<Objective>(
      r, top, "objective",
      {{"sft", Objective::kSft}, {"dpo", Objective::kDpo}, {"grpo", Objective::kGrpo}},
      s.objective));
  RETURN_IF_ERROR(ReadData(r, top, s));
  RETURN_IF_ERROR(ReadPositiveInt(r, top, "seq_len", kMaxSpecSeqLen, s.seq_len));
  RETURN_IF_ERROR(ReadEnum<Truncation>(
      r, top, "truncation", {{"reject", Truncation::kReject}, {"truncate", Truncation::kTruncate}},
      s.truncation));
  RETURN_IF_ERROR(ReadPositiveInt(r, top, "log_every_steps", kMaxSpecSteps, s.log_every_steps));
  RETURN_IF_ERROR(ReadNonNegativeInt(r, top, "max_restarts", kMaxSpecRestarts, s.max_restarts));
  RETURN_IF_ERROR(ReadInt(r, top, "priority", INT64_MIN, INT64_MAX, "", s.priority));

  // streambp
  ASSIGN_OR_RETURN(Block sb, Block::Make(r, top.Get("streambp"), "streambp"));
  RETURN_IF_ERROR(ReadEnum<BackwardMode>(r, sb, "mode",
                                         {{"stream", BackwardMode::kStream},
                                          {"checkpoint", BackwardMode::kCheckpoint},
                                          {"full", BackwardMode::kFull}},
                                         s.streambp.mode));
  RETURN_IF_ERROR(ReadChunk(r, sb, "chunk_tokens", s.streambp.chunk_tokens));
  RETURN_IF_ERROR(ReadChunk(r, sb, "logits_chunk_tokens", s.streambp.logits_chunk_tokens));
  ASSIGN_OR_RETURN(Block ob, Block::Make(r, sb.Get("offload"), "streambp.offload"));
  {
    std::string tier = "auto";
    RETURN_IF_ERROR(ReadString(r, ob, "checkpoints", tier));
    if (tier != "auto") {
      absl::StatusOr<CheckpointTier> parsed = ParseCheckpointTier(tier);
      if (!parsed.ok()) {
        return r.Got(ob.Path("checkpoints"), "must be auto, device, host or disk",
                     ob.Get("checkpoints"));
      }
      s.streambp.offload.checkpoints = *parsed;
    }
  }
  RETURN_IF_ERROR(ReadPath(r, ob, "disk_dir", s.streambp.offload.disk_dir));

  // train
  ASSIGN_OR_RETURN(Block tb, Block::Make(r, top.Get("train"), "train"));
  TrainSpec& t = s.train;
  RETURN_IF_ERROR(ReadPositiveInt(r, tb, "steps", kMaxSpecSteps, t.steps));
  RETURN_IF_ERROR(
      ReadPositiveInt(r, tb, "sequences_per_step", kMaxSpecSequencesPerStep, t.sequences_per_step));
  t.micro_batch_sequences = t.sequences_per_step;
  RETURN_IF_ERROR(ReadPositiveInt(r, tb, "micro_batch_sequences", kMaxSpecSequencesPerStep,
                                  t.micro_batch_sequences));
  if (t.micro_batch_sequences > t.sequences_per_step) {
    return r.Got(
        tb.Path("micro_batch_sequences"),
        absl::StrCat("must be at most train.sequences_per_step (", t.sequences_per_step, ")"),
        tb.Get("micro_batch_sequences"));
  }
  RETURN_IF_ERROR(ReadNumber(r, tb, "lr", Positive, "must be a positive number", t.lr));
  RETURN_IF_ERROR(ReadEnum<LrSchedule>(r, tb, "schedule",
                                       {{"constant", LrSchedule::kConstant},
                                        {"linear", LrSchedule::kLinear},
                                        {"cosine", LrSchedule::kCosine}},
                                       t.schedule));
  RETURN_IF_ERROR(ReadNonNegativeInt(r, tb, "warmup_steps", kMaxSpecSteps, t.warmup_steps));
  if (t.warmup_steps > t.steps) {
    return r.Got(tb.Path("warmup_steps"),
                 absl::StrCat("must be at most train.steps (", t.steps, ")"),
                 tb.Get("warmup_steps"));
  }
  RETURN_IF_ERROR(
      ReadNumber(r, tb, "min_lr_ratio", UnitClosed, "must be a number in [0, 1]", t.min_lr_ratio));
  RETURN_IF_ERROR(ReadNumber(r, tb, "weight_decay", NonNegative, "must be a non-negative number",
                             t.weight_decay));
  if (tb.Has("betas")) {
    if (tb.Has("beta1") || tb.Has("beta2")) {
      return r.Error(tb.Path("betas"), "give either betas or beta1/beta2, not both");
    }
    const YAML::Node betas = tb.Get("betas");
    if (!betas.IsSequence() || betas.size() != 2) {
      return r.Got(tb.Path("betas"), "must be a list of two numbers [beta1, beta2]", betas);
    }
    RETURN_IF_ERROR(ReadNumberNode(r, betas[0], tb.Path("betas[0]"), UnitOpen,
                                   "must be a number in [0, 1)", t.beta1));
    RETURN_IF_ERROR(ReadNumberNode(r, betas[1], tb.Path("betas[1]"), UnitOpen,
                                   "must be a number in [0, 1)", t.beta2));
  }
  RETURN_IF_ERROR(ReadNumber(r, tb, "beta1", UnitOpen, "must be a number in [0, 1)", t.beta1));
  RETURN_IF_ERROR(ReadNumber(r, tb, "beta2", UnitOpen, "must be a number in [0, 1)", t.beta2));
  RETURN_IF_ERROR(ReadNumber(r, tb, "eps", Positive, "must be a positive number", t.eps));
  RETURN_IF_ERROR(ReadNumber(r, tb, "max_grad_norm", NonNegative,
                             "must be a non-negative number (0 turns clipping off)",
                             t.max_grad_norm));
  RETURN_IF_ERROR(ReadNonNegativeInt(r, tb, "seed", INT64_MAX, t.seed));
  RETURN_IF_ERROR(ReadEnum<Precision>(
      r, tb, "precision", {{"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}}, t.precision));
  RETURN_IF_ERROR(ReadNonNegativeInt(r, tb, "epochs", kMaxSpecSteps, t.epochs));
  RETURN_IF_ERROR(ReadBool(r, tb, "shuffle", t.shuffle));
  RETURN_IF_ERROR(ReadBool(r, tb, "optimizer_offload", t.optimizer_offload));
  RETURN_IF_ERROR(ReadInt(r, tb, "zero_stage", 2, 3,
                          "must be 2 (sharded gradients and optimizer state) or 3 (the compute "
                          "weights sharded too)",
                          t.zero_stage));

  // dpo, grpo: always read, so that their defaults are filled in.
  ASSIGN_OR_RETURN(Block db, Block::Make(r, top.Get("dpo"), "dpo"));
  RETURN_IF_ERROR(ReadNumber(r, db, "beta", Positive, "must be a positive number", s.dpo.beta));
  RETURN_IF_ERROR(ReadPath(r, db, "reference", s.dpo.reference));
  if (s.dpo.reference.empty()) s.dpo.reference = s.model;

  ASSIGN_OR_RETURN(Block gb, Block::Make(r, top.Get("grpo"), "grpo"));
  RETURN_IF_ERROR(ReadNumber(r, gb, "beta", NonNegative,
                             "must be a non-negative number (0: no KL term)", s.grpo.beta));
  RETURN_IF_ERROR(
      ReadNumber(r, gb, "epsilon", Positive, "must be a positive number", s.grpo.epsilon));
  RETURN_IF_ERROR(ReadEnum<GrpoLoss>(
      r, gb, "loss",
      {{"grpo", GrpoLoss::kGrpo}, {"bnpo", GrpoLoss::kBnpo}, {"dr_grpo", GrpoLoss::kDrGrpo}},
      s.grpo.loss));
  RETURN_IF_ERROR(ReadPath(r, gb, "reference", s.grpo.reference));
  if (s.grpo.reference.empty()) s.grpo.reference = s.model;
  if (gb.Has("rollout") || gb.Has("reward")) {
    if (s.objective != Objective::kGrpo) {
      return r.Error(gb.Has("rollout") ? "grpo.rollout" : "grpo.reward",
                     absl::StrCat("samples completions for objective grpo; this job's objective "
                                  "is ",
                                  ObjectiveName(s.objective)));
    }
    if (!gb.Has("rollout")) {
      return r.Error("grpo.reward",
                     "scores sampled completions; it needs grpo.rollout (at least group_size)");
    }
    if (!gb.Has("reward")) {
      return r.Error("grpo.rollout",
                     "needs grpo.reward (a built-in function or a command) to score its samples");
    }
    ASSIGN_OR_RETURN(Block rb, Block::Make(r, gb.Get("rollout"), "grpo.rollout"));
    RETURN_IF_ERROR(ReadRollout(r, rb, s.seq_len, s.grpo.rollout));
    ASSIGN_OR_RETURN(Block wb, Block::Make(r, gb.Get("reward"), "grpo.reward"));
    RETURN_IF_ERROR(ReadReward(r, wb, s.grpo.reward));
    // These read the completion's text, which needs the tokenizer.
    const std::string& function = s.grpo.reward.function;
    if ((function == "math_answer" || function == "regex") && s.grpo.rollout.tokenizer.empty()) {
      return r.Error("grpo.rollout.tokenizer",
                     absl::StrCat("is needed by reward function ", function,
                                  ", which reads the completion's text (a directory with the "
                                  "model's tokenizer.json)"));
    }
    if (s.grpo.reward.length_penalty_buffer > s.grpo.rollout.max_new_tokens) {
      return r.Error("grpo.reward.length_penalty_buffer",
                     absl::StrCat("is longer than grpo.rollout.max_new_tokens (",
                                  s.grpo.rollout.max_new_tokens, ")"));
    }
  }

  if (top.Has("lora")) {
    ASSIGN_OR_RETURN(Block lb, Block::Make(r, top.Get("lora"), "lora"));
    RETURN_IF_ERROR(ReadLora(r, lb, s.lora));
  }

  if (top.Has("eval")) {
    ASSIGN_OR_RETURN(Block eb, Block::Make(r, top.Get("eval"), "eval"));
    RETURN_IF_ERROR(ReadEval(r, eb, s.objective, s.eval));
  }

  // resources
  ASSIGN_OR_RETURN(Block rb, Block::Make(r, top.Get("resources"), "resources"));
  RETURN_IF_ERROR(ReadPositiveInt(r, rb, "world_size", kMaxSpecWorldSize, s.resources.world_size));
  RETURN_IF_ERROR(ReadPositiveInt(r, rb, "sequence_parallel", kMaxSpecWorldSize,
                                  s.resources.sequence_parallel));
  if (s.resources.world_size % s.resources.sequence_parallel != 0) {
    return r.Got(rb.Path("sequence_parallel"),
                 absl::StrCat("must divide resources.world_size (", s.resources.world_size,
                              ") into groups of ranks that share a sequence"),
                 rb.Get("sequence_parallel"));
  }
  RETURN_IF_ERROR(ReadEnum<DeviceKind>(r, rb, "device",
                                       {{DeviceKindName(DeviceKind::kCpu), DeviceKind::kCpu},
                                        {DeviceKindName(DeviceKind::kCuda), DeviceKind::kCuda}},
                                       s.resources.device));
  if (rb.Has("memory")) {
    const YAML::Node node = rb.Get("memory");
    absl::StatusOr<int64_t> bytes = absl::InvalidArgumentError("");
    if (node.IsScalar()) bytes = ParseByteSize(node.Scalar());
    if (!bytes.ok() || *bytes <= 0) {
      return r.Got(rb.Path("memory"), "must be a positive byte size such as 8GiB or 512MiB", node);
    }
    s.resources.memory_bytes = *bytes;
  }

  // checkpoint
  ASSIGN_OR_RETURN(Block cb, Block::Make(r, top.Get("checkpoint"), "checkpoint"));
  RETURN_IF_ERROR(
      ReadNonNegativeInt(r, cb, "every_steps", kMaxSpecSteps, s.checkpoint.every_steps));
  RETURN_IF_ERROR(ReadPath(r, cb, "dir", s.checkpoint.dir));  // "": one per job (trainer)
  RETURN_IF_ERROR(ReadPath(r, top, "resume_from", s.resume_from));
  RETURN_IF_ERROR(ReadNonNegativeInt(r, cb, "keep_last", kMaxSpecSteps, s.checkpoint.keep_last));

  // Rules between blocks.
  if (!s.streambp.offload.disk_dir.empty() && s.streambp.offload.checkpoints.has_value() &&
      *s.streambp.offload.checkpoints != CheckpointTier::kDisk) {
    return r.Error("streambp.offload.disk_dir",
                   absl::StrCat("is where the disk tier writes; streambp.offload.checkpoints is ",
                                CheckpointTierName(*s.streambp.offload.checkpoints),
                                " (use disk or auto, or leave disk_dir out)"));
  }
  // Each data-parallel group (one rank without sequence parallelism) takes
  // whole examples.
  if (s.grpo.online() && s.resources.sequence_parallel > 1) {
    return r.Error("resources.sequence_parallel",
                   "is not supported with online GRPO (grpo.rollout) yet: each worker decodes "
                   "whole sequences; use 1");
  }
  const int64_t groups = s.resources.world_size / s.resources.sequence_parallel;
  if (t.sequences_per_step < groups) {
    return r.Got(
        tb.Path("sequences_per_step"),
        s.resources.sequence_parallel == 1
            ? absl::StrCat("must be at least resources.world_size (", s.resources.world_size,
                           ") so that every worker gets an example")
            : absl::StrCat("must be at least resources.world_size / "
                           "resources.sequence_parallel (",
                           groups, ") so that every group of ranks gets an example"),
        tb.Has("sequences_per_step") ? tb.Get("sequences_per_step")
                                     : YAML::Node(t.sequences_per_step));
  }
  if (t.zero_stage == 3 && s.resources.world_size == 1) {
    return r.Error(tb.Path("zero_stage"),
                   "3 shards the compute weights over the job's workers; it needs "
                   "resources.world_size > 1");
  }
  // Under ZeRO-3 every pass gathers weights with all ranks, so every rank
  // must run the same passes: the same number of examples, each a fixed
  // number of passes (not GRPO's groups of any size, nor packed sequences).
  if (t.zero_stage == 3 && t.sequences_per_step % groups != 0) {
    return r.Got(tb.Path("sequences_per_step"),
                 absl::StrCat("must be a multiple of the ", groups,
                              " data-parallel groups under train.zero_stage: 3 (every worker "
                              "runs the same passes)"),
                 tb.Has("sequences_per_step") ? tb.Get("sequences_per_step")
                                              : YAML::Node(t.sequences_per_step));
  }
  if (t.zero_stage == 3 && s.objective == Objective::kGrpo) {
    return r.Error(tb.Path("zero_stage"),
                   "3 is not supported with objective grpo yet (its groups hold different "
                   "numbers of completions, and under ZeRO-3 every worker must run the same "
                   "passes; use 2)");
  }
  if (t.zero_stage == 3 && s.data_packing) {
    return r.Error(tb.Path("zero_stage"),
                   "3 is not supported with data.packing yet (workers would run different "
                   "numbers of packed sequences; use 2)");
  }
  if (t.zero_stage == 3 && s.lora.enabled()) {
    return r.Error(tb.Path("zero_stage"),
                   "3 is not supported with lora yet (LoRA keeps the frozen base whole on each "
                   "worker; use 2)");
  }
  if (t.precision == Precision::kBf16 && s.resources.device != DeviceKind::kCuda) {
    return r.Error(tb.Path("precision"),
                   "bf16 needs resources.device: cuda (the CPU backend computes in fp32)");
  }
  return s;
}

// ---------------------------------------------------------------------------
// Writing.

Json ToJsonValue(const JobSpec& s) {
  auto chunk = [](int64_t v) { return v == 0 ? Json("auto") : Json(v); };
  Json j = Json::object();
  j["name"] = s.name;
  j["model"] = s.model;
  j["data"] = s.data_packing ? Json{{"path", s.data}, {"packing", true}} : Json(s.data);
  j["objective"] = ObjectiveName(s.objective);
  j["seq_len"] = s.seq_len;
  j["truncation"] = TruncationName(s.truncation);
  j["log_every_steps"] = s.log_every_steps;
  j["streambp"] = {{"mode", BackwardModeName(s.streambp.mode)},
                   {"chunk_tokens", chunk(s.streambp.chunk_tokens)},
                   {"logits_chunk_tokens", chunk(s.streambp.logits_chunk_tokens)}};
  const OffloadSpec& off = s.streambp.offload;
  j["streambp"]["offload"] = {
      {"checkpoints", off.checkpoints ? Json(CheckpointTierName(*off.checkpoints)) : Json("auto")}};
  if (!off.disk_dir.empty()) j["streambp"]["offload"]["disk_dir"] = off.disk_dir;
  const TrainSpec& t = s.train;
  j["train"] = {{"steps", t.steps},
                {"sequences_per_step", t.sequences_per_step},
                {"micro_batch_sequences", t.micro_batch_sequences},
                {"lr", t.lr},
                {"schedule", LrScheduleName(t.schedule)},
                {"warmup_steps", t.warmup_steps},
                {"min_lr_ratio", t.min_lr_ratio},
                {"weight_decay", t.weight_decay},
                {"beta1", t.beta1},
                {"beta2", t.beta2},
                {"eps", t.eps},
                {"max_grad_norm", t.max_grad_norm},
                {"seed", t.seed},
                {"precision", PrecisionName(t.precision)},
                {"epochs", t.epochs},
                {"shuffle", t.shuffle},
                {"optimizer_offload", t.optimizer_offload}};
  // Written only when set, as resources.sequence_parallel below.
  if (t.zero_stage != 2) j["train"]["zero_stage"] = t.zero_stage;
  j["dpo"] = {{"beta", s.dpo.beta}, {"reference", s.dpo.reference}};
  j["grpo"] = {{"beta", s.grpo.beta},
               {"epsilon", s.grpo.epsilon},
               {"loss", GrpoLossName(s.grpo.loss)},
               {"reference", s.grpo.reference}};
  // Written only for online jobs, so that offline specs hash as before.
  if (s.grpo.online()) {
    const RolloutSpec& o = s.grpo.rollout;
    Json rollout = {{"group_size", o.group_size},
                    {"max_new_tokens", o.max_new_tokens},
                    {"temperature", o.temperature},
                    {"top_p", o.top_p},
                    {"top_k", o.top_k}};
    if (!o.eos_from_config) rollout["eos_token_id"] = o.eos_token_ids;
    if (!o.stop.empty()) rollout["stop"] = o.stop;
    if (!o.tokenizer.empty()) rollout["tokenizer"] = o.tokenizer;
    j["grpo"]["rollout"] = rollout;
    const RewardSpec& w = s.grpo.reward;
    Json reward = {{"reference_field", w.reference_field},
                   {"timeout_s", w.timeout_s},
                   {"length_penalty_buffer", w.length_penalty_buffer},
                   {"length_penalty_weight", w.length_penalty_weight}};
    if (!w.function.empty()) reward["function"] = w.function;
    if (!w.pattern.empty()) reward["pattern"] = w.pattern;
    if (!w.command.empty()) reward["command"] = w.command;
    j["grpo"]["reward"] = reward;
  }
  j["resources"] = {{"world_size", s.resources.world_size},
                    {"device", DeviceKindName(s.resources.device)}};
  // Written only when set, so that the spec hash of a job without sequence
  // parallelism (run_directory.cc) is what it was before the field existed.
  if (s.resources.sequence_parallel != 1) {
    j["resources"]["sequence_parallel"] = s.resources.sequence_parallel;
  }
  if (s.resources.memory_bytes > 0) {
    j["resources"]["memory"] = FormatExactByteSize(s.resources.memory_bytes);
  }
  j["checkpoint"] = {{"every_steps", s.checkpoint.every_steps},
                     {"keep_last", s.checkpoint.keep_last}};
  if (!s.checkpoint.dir.empty()) j["checkpoint"]["dir"] = s.checkpoint.dir;
  if (!s.resume_from.empty()) j["resume_from"] = s.resume_from;
  j["max_restarts"] = s.max_restarts;
  j["priority"] = s.priority;
  if (s.eval.enabled()) {
    j["eval"] = {{"data", s.eval.data},
                 {"every_steps", s.eval.every_steps},
                 {"max_examples", s.eval.max_examples}};
  }
  if (s.lora.enabled()) {
    j["lora"] = {{"r", s.lora.r},
                 {"alpha", s.lora.alpha},
                 {"target_modules", s.lora.target_modules},
                 {"rslora", s.lora.rslora},
                 {"init_seed", s.lora.init_seed},
                 {"dropout", s.lora.dropout}};
  }
  return j;
}

// JSON value -> YAML node, so that JSON goes through the YAML validation.
YAML::Node JsonToYaml(const Json& j) {
  switch (j.type()) {
    case Json::value_t::object: {
      YAML::Node node(YAML::NodeType::Map);
      for (auto it = j.begin(); it != j.end(); ++it) node[it.key()] = JsonToYaml(it.value());
      return node;
    }
    case Json::value_t::array: {
      YAML::Node node(YAML::NodeType::Sequence);
      for (const Json& v : j) node.push_back(JsonToYaml(v));
      return node;
    }
    case Json::value_t::string:
      return YAML::Node(j.get<std::string>());
    case Json::value_t::boolean:
      return YAML::Node(std::string(j.get<bool>() ? "true" : "false"));
    case Json::value_t::number_integer:
      return YAML::Node(absl::StrCat(j.get<int64_t>()));
    case Json::value_t::number_unsigned:
      return YAML::Node(absl::StrCat(j.get<uint64_t>()));
    case Json::value_t::number_float:
      return YAML::Node(FormatDouble(j.get<double>()));
    default:
      return YAML::Node(YAML::NodeType::Null);
  }
}

void EmitJson(YAML::Emitter& out, const Json& j) {
  switch (j.type()) {
    case Json::value_t::object:
      out << YAML::BeginMap;
      for (auto it = j.begin(); it != j.end(); ++it) {
        out << YAML::Key << it.key() << YAML::Value;
        EmitJson(out, it.value());
      }
      out << YAML::EndMap;
      break;
    case Json::value_t::array:
      out << YAML::Flow << YAML::BeginSeq;
      for (const Json& item : j) EmitJson(out, item);
      out << YAML::EndSeq;
      break;
    case Json::value_t::string:
      out << j.get<std::string>();
      break;
    case Json::value_t::boolean:
      out << (j.get<bool>() ? "true" : "false");
      break;
    case Json::value_t::number_integer:
      out << absl::StrCat(j.get<int64_t>());
      break;
    case Json::value_t::number_unsigned:
      out << absl::StrCat(j.get<uint64_t>());
      break;
    case Json::value_t::number_float:
      out << FormatDouble(j.get<double>());
      break;
    default:
      out << YAML::Null;
      break;
  }
}

std::string MessageOf(const std::exception& e) { return Sanitize(e.what()); }

// Sees a document's events and keeps only where each document starts.
class DocumentStarts final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  std::vector<YAML::Mark> starts;
};

// The number of YAML documents in `text`. yaml-cpp 0.7 never gets past a ','
// where a document should start ("," or "[a], b"): YAML::LoadAll would
// collect empty documents there until memory runs out. Documents are counted
// here instead, and one that starts where the previous one did is an error.
// Throws what the parser throws.
absl::StatusOr<size_t> CountYamlDocuments(const std::string& text, absl::string_view prefix) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts events;
  while (parser.HandleNextDocument(events)) {
    const size_t n = events.starts.size();
    if (n >= 2 && events.starts[n - 1].pos == events.starts[n - 2].pos) {
      const YAML::Mark& mark = events.starts[n - 1];
      const size_t pos = static_cast<size_t>(std::max(mark.pos, 0));
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "line ", mark.line + 1, ", column ", mark.column + 1,
                       ": invalid YAML: unexpected ",
                       pos < text.size() ? absl::StrCat("'", Sanitize(text.substr(pos, 1)), "'")
                                         : std::string("end of text")));
    }
    if (n > text.size() + 1) {  // every document takes at least one byte
      return absl::InvalidArgumentError(absl::StrCat(prefix, "invalid YAML: the parser is stuck"));
    }
  }
  return events.starts.size();
}

absl::Status CheckSpecText(absl::string_view text, absl::string_view prefix, int64_t limit) {
  if (text.size() <= static_cast<size_t>(limit)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(prefix, "the job spec has ", text.size(),
                                                 " bytes, over the ", LimitText(limit), " limit"));
}

}  // namespace

std::vector<std::string> JobSpecKeys() {
  std::vector<std::string> keys;
  auto add = [&keys](std::string key) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(std::move(key));
  };
  for (absl::string_view key : TopKeys()) add(std::string(key));
  for (const auto& [block, block_keys] : BlockKeys()) {
    add(std::string(block));
    for (absl::string_view key : block_keys) add(absl::StrCat(block, ".", key));
  }
  return keys;
}

absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view yaml_text, absl::string_view source_name) {
  const Reader reader(source_name);
  const std::string prefix = source_name.empty() ? "" : absl::StrCat(source_name, ": ");
  RETURN_IF_ERROR(CheckSpecText(yaml_text, prefix, kMaxJobSpecBytes));
  // Before parsing: yaml-cpp recurses once per nesting level.
  RETURN_IF_ERROR(CheckYamlNesting(yaml_text, kMaxInputNestingDepth, source_name));
  try {
    const std::string text(yaml_text);
    YAML::Node document;
    size_t documents = 0;
    try {
      ASSIGN_OR_RETURN(documents, CountYamlDocuments(text, prefix));
      if (documents == 1) document = YAML::Load(text);
    } catch (const YAML::DeepRecursion& e) {  // block nesting past yaml-cpp's own limit
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "line ", e.mark.line + 1, ": YAML nested deeper than ", e.depth(), " levels"));
    } catch (const YAML::ParserException& e) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, "line ", e.mark.line + 1, ", column ",
                                                     e.mark.column + 1, ": invalid YAML: ", e.msg));
    }
    if (documents > 1) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, "expected one YAML document, found ",
                                                     documents, " (separated by ---)"));
    }
    return ReadSpec(reader, document);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "cannot read the job spec: ", MessageOf(e)));
  }
}

absl::StatusOr<JobSpec> JobSpecFromJson(absl::string_view json_text,
                                        absl::string_view source_name) {
  const Reader reader(source_name);
  const std::string prefix = source_name.empty() ? "" : absl::StrCat(source_name, ": ");
  // The JSON form of a spec of kMaxJobSpecBytes may be longer: an escaped
  // control character takes six bytes.
  RETURN_IF_ERROR(CheckSpecText(json_text, prefix, 6 * kMaxJobSpecBytes));
  // Before parsing: JsonToYaml recurses once per nesting level.
  RETURN_IF_ERROR(CheckJsonNesting(json_text, kMaxInputNestingDepth, source_name));
  try {
    Json j;
    try {
      j = Json::parse(json_text.begin(), json_text.end());
    } catch (const Json::parse_error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "invalid JSON at byte ", e.byte, ": ", MessageOf(e)));
    }
    return ReadSpec(reader, JsonToYaml(j));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "cannot read the job spec: ", MessageOf(e)));
  }
}

absl::StatusOr<std::string> ReadJobSpecFile(const std::string& path) {
  return ReadRegularFile(path, kMaxJobSpecBytes, "a job spec");
}

std::string JobSpecToJson(const JobSpec& spec) {
  // Names and paths may hold invalid UTF-8; replace rather than throw.
  return ToJsonValue(spec).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string JobSpecToYaml(const JobSpec& spec) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  const Json j = ToJsonValue(spec);
  // The schema's order, the same as DESIGN.md §5, rather than the JSON's
  // sorted keys.
  for (absl::string_view key : TopKeys()) {
    const auto found = j.find(std::string(key));
    if (found == j.end()) continue;  // optional and unset (resume_from)
    const Json& value = *found;
    out << YAML::Key << std::string(key) << YAML::Value;
    if (value.is_object()) {
      out << YAML::BeginMap;
      for (absl::string_view field : KeysOf(key)) {
        const auto it = value.find(std::string(field));
        if (it == value.end()) continue;
        out << YAML::Key << std::string(field) << YAML::Value;
        EmitJson(out, *it);
      }
      out << YAML::EndMap;
    } else {
      EmitJson(out, value);
    }
  }
  out << YAML::EndMap;
  return absl::StrCat(out.c_str(), "\n");
}

std::string ResolveJobPath(absl::string_view base_dir, absl::string_view path) {
  const std::filesystem::path p{std::string(path)};
  if (p.is_absolute() || base_dir.empty()) return p.string();
  return (std::filesystem::path(std::string(base_dir)) / p).string();
}

namespace {

absl::Status CheckModelDir(absl::string_view field, absl::string_view base_dir,
                           const std::string& path) {
  const std::string dir = ResolveJobPath(base_dir, path);
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": directory '", dir, "' does not exist"));
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", dir, "' is not a directory"));
  }
  const std::filesystem::path config = std::filesystem::path(dir) / "config.json";
  if (!std::filesystem::exists(config, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": directory '", dir, "' has no config.json"));
  }
  if (!std::filesystem::is_regular_file(config, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", config.string(),
                                                   "' is not a regular file (only regular files "
                                                   "are read)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpecFiles(const JobSpec& spec, absl::string_view base_dir) {
  RETURN_IF_ERROR(CheckModelDir("model", base_dir, spec.model));
  const std::string data = ResolveJobPath(base_dir, spec.data);
  std::error_code ec;
  if (!std::filesystem::exists(data, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("data: file '", data, "' does not exist"));
  }
  if (!std::filesystem::is_regular_file(data, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data: '", data, "' is not a regular file (only regular files are read)"));
  }
  if (spec.eval.enabled()) {
    const std::string eval_data = ResolveJobPath(base_dir, spec.eval.data);
    if (!std::filesystem::is_regular_file(eval_data, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat("eval.data: '", eval_data, "' ",
                       std::filesystem::exists(eval_data, ec)
                           ? "is not a regular file (only regular files are read)"
                           : "does not exist"));
    }
  }
  if (spec.objective == Objective::kDpo) {
    RETURN_IF_ERROR(CheckModelDir("dpo.reference", base_dir, spec.dpo.reference));
  }
  if (spec.objective == Objective::kGrpo && spec.grpo.beta > 0) {
    RETURN_IF_ERROR(CheckModelDir("grpo.reference", base_dir, spec.grpo.reference));
  }
  if (spec.grpo.online() && !spec.grpo.rollout.tokenizer.empty()) {
    const std::string tokenizer =
        ResolveJobPath(base_dir, spec.grpo.rollout.tokenizer) + "/tokenizer.json";
    if (!std::filesystem::is_regular_file(tokenizer, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat("grpo.rollout.tokenizer: '", tokenizer, "' ",
                       std::filesystem::exists(tokenizer, ec)
                           ? "is not a regular file (only regular files are read)"
                           : "does not exist"));
    }
  }
  return absl::OkStatus();
}

}  // namespace sbp
