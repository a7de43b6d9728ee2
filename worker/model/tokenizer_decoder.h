// Token ids -> UTF-8 text for Hugging Face byte-level BPE tokenizers
// (tokenizer.json with model.type "BPE" and a "ByteLevel" decoder, alone or in
// a "Sequence": GPT-2, Qwen2/Qwen3, Llama 3). Decoding only, no encoding.
//
// Matches `tokenizers` (Tokenizer::decode) and transformers 5 decode():
//  - an id maps to its added token's content when added_tokens has it, else to
//    its model.vocab string; with skip_special, tokens whose string is the
//    content of an added token marked "special" are left out;
//  - the ByteLevel decoder maps each token's characters back to bytes through
//    the GPT-2 bytes_to_unicode alphabet; a token with a character outside that
//    alphabet (an added token such as "<think> x") contributes its own UTF-8
//    bytes instead;
//  - the bytes of all tokens are joined and read as UTF-8 with each maximal
//    ill-formed subsequence (a character cut in two, say) replaced by U+FFFD,
//    as Rust's String::from_utf8_lossy and Python's errors="replace" do;
//  - transformers' clean_up_tokenization (" ." -> ".", ...) is applied only
//    when tokenizer_config.json asks for it in the way transformers 5 honours
//    for BPE: clean_up_tokenization_spaces and
//    clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output
//    both true.
// Unlike `tokenizers`, which drops unknown ids silently, an id outside the
// vocabulary is an error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace sbp {

// tokenizer.json files larger than this are refused before they are read.
inline constexpr int64_t kMaxTokenizerJsonBytes = int64_t{64} << 20;

class TokenizerDecoder {
 public:
  // Reads <dir>/tokenizer.json and, when present, <dir>/tokenizer_config.json.
  // A missing tokenizer.json is NotFound; a malformed or unsupported one
  // (not JSON, no model.vocab, a model other than BPE, a decoder other than
  // ByteLevel, bad ids) is InvalidArgument naming the file and the problem.
  static absl::StatusOr<TokenizerDecoder> Load(const std::string& dir);

  // The same from the files' text; `config_json` may be empty (no
  // tokenizer_config.json). `source` names the tokenizer.json in messages
  // (errors in `config_json` name "tokenizer_config.json").
  static absl::StatusOr<TokenizerDecoder> Parse(absl::string_view tokenizer_json,
                                                absl::string_view config_json,
                                                absl::string_view source);

  // Largest id + 1 over model.vocab and added_tokens.
  int64_t vocab_size() const { return vocab_size_; }

  // The text of `ids`. InvalidArgument naming the id and its position when an
  // id is not in the vocabulary.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     bool skip_special = false) const;

  // The id of a token as tokenizer.json spells it: an added token's content
  // ("<|im_end|>") or a model.vocab string in the byte-level alphabet ("Ġthe").
  std::optional<int32_t> TokenId(std::string_view token) const;

  // Whether skip_special drops `id`: its token string is the content of an
  // added token marked "special".
  bool IsSpecial(int32_t id) const;

 private:
  struct Token {
    std::string bytes;  // what the token contributes before UTF-8 repair
    bool special = false;
  };

  TokenizerDecoder() = default;

  absl::flat_hash_map<int32_t, Token> tokens_;           // by id
  absl::flat_hash_map<std::string, int32_t> added_ids_;  // added token content -> id
  absl::flat_hash_map<std::string, int32_t> vocab_ids_;  // model.vocab string -> id
  int64_t vocab_size_ = 0;
  bool clean_up_spaces_ = false;
};

// `bytes` as UTF-8 with every maximal ill-formed subsequence replaced by one
// U+FFFD (Unicode's "best practice", as from_utf8_lossy and Python apply it).
std::string Utf8Lossy(absl::string_view bytes);

}  // namespace sbp
