#include "worker/model/tokenizer_decoder.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/input_limits.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/model/json_describe.h"

namespace sbp {
namespace {

using Json = nlohmann::json;

// GPT-2's bytes_to_unicode, inverted: code point -> byte, -1 where none. The
// printable bytes '!'..'~', '¡'..'¬' and '®'..'ÿ' stand for themselves; the
// other 68 bytes, in increasing order, are 256, 257, ... (up to 323).
constexpr int kAlphabetSize = 256 + 68;

std::array<int16_t, kAlphabetSize> MakeCharToByte() {
  std::array<int16_t, kAlphabetSize> table;
  table.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[printable ? b : next++] = static_cast<int16_t>(b);
  }
  return table;
}

const std::array<int16_t, kAlphabetSize>& CharToByte() {
  static const std::array<int16_t, kAlphabetSize> table = MakeCharToByte();
  return table;
}

// What the ByteLevel decoder makes of one token: its characters mapped back
// to bytes, or, when one of them is outside the alphabet, its own UTF-8.
std::string ByteLevelBytes(absl::string_view token) {
  const auto& table = CharToByte();
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const auto b0 = static_cast<unsigned char>(token[i]);
    int code_point = -1;
    if (b0 < 0x80) {
      code_point = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < token.size() &&
               (static_cast<unsigned char>(token[i + 1]) & 0xC0) == 0x80) {
      code_point = ((b0 & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      i += 2;
    }
    if (code_point < 0 || code_point >= kAlphabetSize || table[code_point] < 0) {
      return std::string(token);
    }
    out.push_back(static_cast<char>(table[code_point]));
  }
  return out;
}

// transformers' clean_up_tokenization: one replacement after the other.
std::string CleanUpTokenization(std::string text) {
  static constexpr std::pair<absl::string_view, absl::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
  };
  for (const auto& [from, to] : kRules) text = absl::StrReplaceAll(text, {{from, to}});
  return text;
}

// A token string for messages, cut short.
std::string QuoteToken(absl::string_view token) {
  return DescribeJsonValue(Json(std::string(token.substr(0, 64))));
}

absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view source) {
  if (text.size() > static_cast<size_t>(kMaxTokenizerJsonBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": has ", text.size(),
                                                   " bytes, over the ",
                                                   LimitText(kMaxTokenizerJsonBytes), " limit"));
  }
  // Before parsing: nested values are copied and destroyed recursively.
  RETURN_IF_ERROR(CheckJsonNesting(text, kMaxInputNestingDepth, source));
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": malformed JSON at byte ", e.byte, ": ", e.what()));
  } catch (const Json::exception& e) {  // e.g. a number too large for a double
    return absl::InvalidArgumentError(absl::StrCat(source, ": malformed JSON: ", e.what()));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": expected a JSON object at the top level (got ", root.type_name(), ")"));
  }
  return root;
}

const Json* Field(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// An id in [0, INT32_MAX): representable as int32, and id + 1 as well.
absl::StatusOr<int32_t> TokenIdValue(const Json& value, absl::string_view source,
                                     absl::string_view where) {
  if (!value.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", where, " must be an integer id (got ", DescribeJsonValue(value), ")"));
  }
  const bool in_range =
      value.is_number_unsigned()
          ? value.get<uint64_t>() < static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
          : value.get<int64_t>() >= 0 && value.get<int64_t>() < std::numeric_limits<int32_t>::max();
  if (!in_range) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", where, " is ", value.dump(), ", outside [0, 2147483647)"));
  }
  return static_cast<int32_t>(value.get<int64_t>());
}

bool IsByteLevel(const Json& decoder) {
  if (!decoder.is_object()) return false;
  const Json* type = Field(decoder, "type");
  return type != nullptr && *type == "ByteLevel";
}

// "string \"Metaspace\"", "without a 'type'", "a JSON number": for messages.
std::string DescribeDecoder(const Json& decoder) {
  if (!decoder.is_object()) return absl::StrCat("a JSON ", decoder.type_name());
  const Json* type = Field(decoder, "type");
  return type == nullptr ? "without a 'type'" : DescribeJsonValue(*type);
}

absl::Status CheckDecoder(const Json& root, absl::string_view source) {
  const Json* decoder = Field(root, "decoder");
  if (decoder == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": has no decoder; only byte-level BPE (decoder \"ByteLevel\") is supported"));
  }
  auto unsupported = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": decoder ", what,
                     " is not supported; only byte-level BPE (decoder \"ByteLevel\", alone or in "
                     "a \"Sequence\") is"));
  };
  if (IsByteLevel(*decoder)) return absl::OkStatus();
  const Json* type = decoder->is_object() ? Field(*decoder, "type") : nullptr;
  if (type == nullptr || *type != "Sequence") return unsupported(DescribeDecoder(*decoder));
  const Json* decoders = Field(*decoder, "decoders");
  if (decoders == nullptr || !decoders->is_array() || decoders->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": decoder \"Sequence\" needs a non-empty 'decoders' list"));
  }
  for (size_t i = 0; i < decoders->size(); ++i) {
    if (!IsByteLevel((*decoders)[i])) {
      return unsupported(absl::StrCat("\"Sequence\" with ", DescribeDecoder((*decoders)[i]),
                                      " at decoders[", i, "]"));
    }
  }
  return absl::OkStatus();
}

// True when tokenizer_config.json makes transformers 5 clean up a BPE
// tokenizer's output.
absl::StatusOr<bool> CleanUpFromConfig(absl::string_view config_json, absl::string_view source) {
  if (config_json.empty()) return false;
  ASSIGN_OR_RETURN(Json config, ParseJson(config_json, source));
  bool both = true;
  for (const char* key :
       {"clean_up_tokenization_spaces",
        "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"}) {
    const Json* value = Field(config, key);
    if (value != nullptr && !value->is_boolean()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": field '", key,
                                                     "' must be true or false (got ",
                                                     DescribeJsonValue(*value), ")"));
    }
    both = both && value != nullptr && value->get<bool>();
  }
  return both;
}

}  // namespace

std::string Utf8Lossy(absl::string_view bytes) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  const size_t n = bytes.size();
  auto at = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  auto in = [](unsigned char c, unsigned char lo, unsigned char hi) { return c >= lo && c <= hi; };
  size_t i = 0;
  while (i < n) {
    const unsigned char b0 = at(i);
    if (b0 < 0x80) {
      out.push_back(static_cast<char>(b0));
      ++i;
      continue;
    }
    // Width and the allowed range of the second byte (Unicode Table 3-7).
    size_t width = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (in(b0, 0xC2, 0xDF)) {
      width = 2;
    } else if (in(b0, 0xE0, 0xEF)) {
      width = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (in(b0, 0xF0, 0xF4)) {
      width = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    }
    // The longest valid prefix of the sequence starting here.
    size_t valid = 1;
    if (width > 0 && i + 1 < n && in(at(i + 1), lo, hi)) {
      valid = 2;
      while (valid < width && i + valid < n && in(at(i + valid), 0x80, 0xBF)) ++valid;
    }
    if (valid == width) {
      out.append(bytes.data() + i, width);
    } else {
      out.append(kReplacement);  // one for the whole maximal ill-formed prefix
    }
    i += valid;
  }
  return out;
}

absl::StatusOr<TokenizerDecoder> TokenizerDecoder::Load(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/tokenizer.json");
  ASSIGN_OR_RETURN(std::string text,
                   ReadRegularFile(path, kMaxTokenizerJsonBytes, "tokenizer.json"));
  const std::string config_path = absl::StrCat(dir, "/tokenizer_config.json");
  std::string config;
  absl::StatusOr<std::string> read =
      ReadRegularFile(config_path, kMaxTokenizerJsonBytes, "tokenizer_config.json");
  if (read.ok()) {
    config = *std::move(read);
    if (config.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(config_path, ": is empty"));
    }
  } else if (!absl::IsNotFound(read.status())) {
    return read.status();
  }
  ASSIGN_OR_RETURN(bool clean_up, CleanUpFromConfig(config, config_path));
  ASSIGN_OR_RETURN(TokenizerDecoder decoder, Parse(text, "", path));
  decoder.clean_up_spaces_ = clean_up;
  return decoder;
}

absl::StatusOr<TokenizerDecoder> TokenizerDecoder::Parse(absl::string_view tokenizer_json,
                                                         absl::string_view config_json,
                                                         absl::string_view source) {
  ASSIGN_OR_RETURN(Json root, ParseJson(tokenizer_json, source));
  auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", parts...));
  };

  const Json* model = Field(root, "model");
  if (model == nullptr || !model->is_object()) return error("has no 'model' object");
  const Json* type = Field(*model, "type");
  if (type != nullptr) {
    if (!type->is_string())
      return error("model.type must be a string (got ", DescribeJsonValue(*type), ")");
    if (type->get<std::string>() != "BPE") {
      return error("model.type is ", DescribeJsonValue(*type),
                   "; only byte-level BPE (\"BPE\") is supported");
    }
  } else if (Field(*model, "merges") == nullptr) {  // old files name BPE by its fields
    return error("model has no 'type' (only byte-level BPE, \"BPE\", is supported)");
  }
  const Json* vocab = Field(*model, "vocab");
  if (vocab == nullptr) return error("has no model.vocab");
  if (!vocab->is_object() || vocab->empty()) {
    return error("model.vocab must be a non-empty object of token -> id (got ",
                 DescribeJsonValue(*vocab), ")");
  }
  RETURN_IF_ERROR(CheckDecoder(root, source));

  // id -> the token string `tokenizers` gives it: the model.vocab entry,
  // replaced by an added token of the same id.
  TokenizerDecoder out;
  absl::flat_hash_map<int32_t, std::string> strings;
  strings.reserve(vocab->size());
  out.vocab_ids_.reserve(vocab->size());
  int64_t max_id = -1;
  for (const auto& [token, value] : vocab->items()) {
    ASSIGN_OR_RETURN(
        int32_t id,
        TokenIdValue(value, source, absl::StrCat("model.vocab[", QuoteToken(token), "]")));
    if (!strings.try_emplace(id, token).second) {
      return error("model.vocab gives id ", id, " to two tokens (", QuoteToken(strings[id]),
                   " and ", QuoteToken(token), ")");
    }
    out.vocab_ids_.emplace(token, id);
    max_id = std::max<int64_t>(max_id, id);
  }

  absl::flat_hash_set<std::string> special_contents;
  if (const Json* added = Field(root, "added_tokens"); added != nullptr) {
    if (!added->is_array()) {
      return error("added_tokens must be a list (got ", DescribeJsonValue(*added), ")");
    }
    absl::flat_hash_set<int32_t> added_seen;
    for (size_t i = 0; i < added->size(); ++i) {
      const Json& entry = (*added)[i];
      const std::string where = absl::StrCat("added_tokens[", i, "]");
      if (!entry.is_object()) {
        return error(where, " must be an object (got ", DescribeJsonValue(entry), ")");
      }
      const Json* id_value = Field(entry, "id");
      const Json* content = Field(entry, "content");
      if (id_value == nullptr) return error(where, " has no 'id'");
      if (content == nullptr || !content->is_string()) {
        return error(where, ".content must be a string");
      }
      ASSIGN_OR_RETURN(int32_t id, TokenIdValue(*id_value, source, absl::StrCat(where, ".id")));
      if (!added_seen.insert(id).second) return error(where, " repeats id ", id);
      if (const Json* flag = Field(entry, "special"); flag != nullptr) {
        if (!flag->is_boolean()) {
          return error(where, ".special must be true or false (got ", DescribeJsonValue(*flag),
                       ")");
        }
        if (flag->get<bool>()) special_contents.insert(content->get<std::string>());
      }
      strings.insert_or_assign(id, content->get<std::string>());
      out.added_ids_.insert_or_assign(content->get<std::string>(), id);
      max_id = std::max<int64_t>(max_id, id);
    }
  }
  // A token is special when its string is a special added token's content
  // (`tokenizers` decides by the string, not by the id).
  out.tokens_.reserve(strings.size());
  for (const auto& [id, text] : strings) {
    out.tokens_.emplace(id, Token{ByteLevelBytes(text), special_contents.contains(text)});
  }
  out.vocab_size_ = max_id + 1;
  ASSIGN_OR_RETURN(out.clean_up_spaces_, CleanUpFromConfig(config_json, "tokenizer_config.json"));
  return out;
}

absl::StatusOr<std::string> TokenizerDecoder::Decode(absl::Span<const int32_t> ids,
                                                     bool skip_special) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = tokens_.find(ids[i]);
    if (it == tokens_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at position ", i,
                                                     " is not in the tokenizer's vocabulary (",
                                                     vocab_size_, " ids)"));
    }
    if (skip_special && it->second.special) continue;
    bytes += it->second.bytes;
  }
  std::string text = Utf8Lossy(bytes);
  if (clean_up_spaces_) text = CleanUpTokenization(std::move(text));
  return text;
}

std::optional<int32_t> TokenizerDecoder::TokenId(std::string_view token) const {
  const absl::string_view key(token.data(), token.size());
  if (auto it = added_ids_.find(key); it != added_ids_.end()) return it->second;
  if (auto it = vocab_ids_.find(key); it != vocab_ids_.end()) return it->second;
  return std::nullopt;
}

bool TokenizerDecoder::IsSpecial(int32_t id) const {
  auto it = tokens_.find(id);
  return it != tokens_.end() && it->second.special;
}

}  // namespace sbp
