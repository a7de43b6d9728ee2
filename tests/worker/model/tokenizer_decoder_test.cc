// TokenizerDecoder against what Hugging Face decodes
// (tests/tokenizer/tiny-bpe/decode_golden.json, written by
// tests/tokenizer/make_decode_golden.py), and its refusals of malformed,
// unsupported and hostile tokenizer.json files.
#include "worker/model/tokenizer_decoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/worker/model/test_util.h"

namespace sbp {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string SourceDir() {
  const char* root = std::getenv("SBP_SOURCE_DIR");
  return root ? root : ".";
}

std::string TinyBpeDir() { return SourceDir() + "/tests/tokenizer/tiny-bpe"; }

Json ReadJson(const std::string& path) {
  const std::string text = testing::ReadFile(path);
  EXPECT_FALSE(text.empty()) << path;
  return Json::parse(text);
}

const Json& Golden() {
  static const Json* golden = new Json(ReadJson(TinyBpeDir() + "/decode_golden.json"));
  return *golden;
}

// Scratch directories, removed when the test program ends.
std::vector<std::string>& ScratchDirs() {
  static auto* dirs = new std::vector<std::string>;
  return *dirs;
}

class RemoveScratchDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const std::string& dir : ScratchDirs()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
};

[[maybe_unused]] ::testing::Environment* const kRemoveScratchDirs =
    ::testing::AddGlobalTestEnvironment(new RemoveScratchDirs);

std::string ScratchDir(absl::string_view prefix) {
  std::string dir = testing::MakeTempDir(prefix);
  ScratchDirs().push_back(dir);
  return dir;
}

// A directory holding `tokenizer_json` as tokenizer.json (and a
// tokenizer_config.json when `config` is given).
std::string TokenizerDir(const std::string& tokenizer_json, const std::string* config = nullptr) {
  const std::string dir = ScratchDir("tokdec");
  testing::WriteFile(dir + "/tokenizer.json", tokenizer_json);
  if (config != nullptr) testing::WriteFile(dir + "/tokenizer_config.json", *config);
  return dir;
}

Json TinyBpeJson() { return ReadJson(TinyBpeDir() + "/tokenizer.json"); }

// Every golden case, byte for byte, with and without skip_special.
void ExpectCases(const TokenizerDecoder& decoder, const Json& cases) {
  ASSERT_TRUE(cases.is_array());
  ASSERT_FALSE(cases.empty());
  for (const Json& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    absl::StatusOr<std::string> text = decoder.Decode(ids);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c["text"].get<std::string>());
    absl::StatusOr<std::string> skipped = decoder.Decode(ids, /*skip_special=*/true);
    ASSERT_TRUE(skipped.ok()) << skipped.status();
    EXPECT_EQ(*skipped, c["text_skip_special"].get<std::string>());
  }
}

TEST(TokenizerDecoderTest, MatchesHuggingFaceOnTinyBpe) {
  absl::StatusOr<TokenizerDecoder> decoder = TokenizerDecoder::Load(TinyBpeDir());
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  EXPECT_EQ(decoder->vocab_size(), Golden()["vocab_size"].get<int64_t>());
  ExpectCases(*decoder, Golden()["cases"]);
}

TEST(TokenizerDecoderTest, TokenIds) {
  absl::StatusOr<TokenizerDecoder> decoder = TokenizerDecoder::Load(TinyBpeDir());
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  for (const auto& [token, id] : Golden()["token_ids"].items()) {
    EXPECT_EQ(decoder->TokenId(token), id.get<int32_t>()) << token;
  }
  EXPECT_EQ(decoder->TokenId("<|no such token|>"), std::nullopt);
  EXPECT_EQ(decoder->TokenId(""), std::nullopt);
  const int32_t im_end = *decoder->TokenId("<|im_end|>");
  EXPECT_TRUE(decoder->IsSpecial(im_end));
  EXPECT_FALSE(decoder->IsSpecial(*decoder->TokenId("a")));
  EXPECT_FALSE(decoder->IsSpecial(-1));
}

// Added tokens outside and inside the byte-level alphabet, a special one, and
// a vocabulary token that an added special token makes special.
TEST(TokenizerDecoderTest, MatchesHuggingFaceWithAddedTokens) {
  Json tokenizer = TinyBpeJson();
  tokenizer["added_tokens"] = Golden()["added_tokens"];
  const std::string config = testing::ReadFile(TinyBpeDir() + "/tokenizer_config.json");
  absl::StatusOr<TokenizerDecoder> decoder =
      TokenizerDecoder::Load(TokenizerDir(tokenizer.dump(), &config));
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  EXPECT_EQ(decoder->vocab_size(), Golden()["added_vocab_size"].get<int64_t>());
  EXPECT_EQ(decoder->TokenId("<think> x"), 512);
  ExpectCases(*decoder, Golden()["added_cases"]);
}

TEST(TokenizerDecoderTest, CleanUpFollowsTokenizerConfigAsTransformersDoes) {
  const std::string tokenizer = testing::ReadFile(TinyBpeDir() + "/tokenizer.json");
  Json base = ReadJson(TinyBpeDir() + "/tokenizer_config.json");
  for (const Json& c : Golden()["clean_up_cases"]) {
    Json config = base;
    config.update(c["config"]);
    const std::string text = config.dump();
    absl::StatusOr<TokenizerDecoder> decoder =
        TokenizerDecoder::Load(TokenizerDir(tokenizer, &text));
    ASSERT_TRUE(decoder.ok()) << decoder.status();
    ExpectCases(*decoder, Json::array({c}));
  }
  const std::string bad = R"({"clean_up_tokenization_spaces": "yes"})";
  absl::StatusOr<TokenizerDecoder> decoder = TokenizerDecoder::Load(TokenizerDir(tokenizer, &bad));
  EXPECT_EQ(decoder.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoder.status().message(),
              HasSubstr("tokenizer_config.json: field 'clean_up_tokenization_spaces' must be"));
  const std::string broken = "{";
  decoder = TokenizerDecoder::Load(TokenizerDir(tokenizer, &broken));
  EXPECT_THAT(decoder.status().message(), HasSubstr("tokenizer_config.json: malformed JSON"));
}

TEST(TokenizerDecoderTest, IdOutsideTheVocabularyNamesIdAndPosition) {
  absl::StatusOr<TokenizerDecoder> decoder = TokenizerDecoder::Load(TinyBpeDir());
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  for (int32_t bad : {512, 100000, -1, std::numeric_limits<int32_t>::max(),
                      std::numeric_limits<int32_t>::min()}) {
    absl::StatusOr<std::string> text = decoder->Decode({67, 68, bad, 69});
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(text.status().message(),
                HasSubstr(absl::StrCat("token id ", bad, " at position 2")));
    // Also when it would have been skipped.
    EXPECT_FALSE(decoder->Decode({bad}, /*skip_special=*/true).ok());
  }
}

TEST(TokenizerDecoderTest, SequenceOfByteLevelDecodersAndOldFilesWithoutModelType) {
  Json tokenizer = TinyBpeJson();
  tokenizer["decoder"] = Json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}]})");
  tokenizer["model"].erase("type");
  absl::StatusOr<TokenizerDecoder> decoder = TokenizerDecoder::Load(TokenizerDir(tokenizer.dump()));
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  ExpectCases(*decoder, Golden()["cases"]);
}

TEST(TokenizerDecoderTest, MissingFiles) {
  const std::string dir = ScratchDir("tokdec-empty");
  absl::StatusOr<TokenizerDecoder> decoder = TokenizerDecoder::Load(dir);
  EXPECT_EQ(decoder.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(decoder.status().message(), HasSubstr(dir + "/tokenizer.json"));
  decoder = TokenizerDecoder::Load(dir + "/missing");
  EXPECT_EQ(decoder.status().code(), absl::StatusCode::kNotFound);
  // Without tokenizer_config.json: no clean-up, nothing else changes.
  decoder =
      TokenizerDecoder::Load(TokenizerDir(testing::ReadFile(TinyBpeDir() + "/tokenizer.json")));
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  ExpectCases(*decoder, Golden()["cases"]);
}

// tokenizer.json texts that must be refused with InvalidArgument naming the
// file and the problem.
struct BadCase {
  const char* name;
  std::string tokenizer_json;
  const char* message;
};

std::string WithTiny(const std::function<void(Json&)>& change) {
  Json tokenizer = TinyBpeJson();
  change(tokenizer);
  return tokenizer.dump();
}

TEST(TokenizerDecoderTest, RefusesMalformedAndUnsupportedFiles) {
  const std::vector<BadCase> cases = {
      {"not JSON", "this is not json", "malformed JSON at byte"},
      {"truncated", testing::ReadFile(TinyBpeDir() + "/tokenizer.json").substr(0, 5000),
       "malformed JSON"},
      {"empty", "", "malformed JSON"},
      {"top-level array", "[1, 2]", "expected a JSON object at the top level (got array)"},
      {"no model", R"({"decoder": {"type": "ByteLevel"}})", "has no 'model' object"},
      {"no vocab", R"({"model": {"type": "BPE"}, "decoder": {"type": "ByteLevel"}})",
       "has no model.vocab"},
      {"vocab is a list", R"({"model": {"type": "BPE", "vocab": [["a", 0]]},
                              "decoder": {"type": "ByteLevel"}})",
       "model.vocab must be a non-empty object"},
      {"empty vocab",
       R"({"model": {"type": "BPE", "vocab": {}}, "decoder": {"type": "ByteLevel"}})",
       "model.vocab must be a non-empty object"},
      {"WordPiece", WithTiny([](Json& t) { t["model"]["type"] = "WordPiece"; }),
       "model.type is string \"WordPiece\"; only byte-level BPE"},
      {"Unigram", WithTiny([](Json& t) { t["model"]["type"] = "Unigram"; }),
       "model.type is string \"Unigram\""},
      {"type not a string", WithTiny([](Json& t) { t["model"]["type"] = 3; }),
       "model.type must be a string"},
      {"no type, no merges", WithTiny([](Json& t) {
         t["model"].erase("type");
         t["model"].erase("merges");
       }),
       "model has no 'type'"},
      {"no decoder", WithTiny([](Json& t) { t.erase("decoder"); }), "has no decoder"},
      {"null decoder", WithTiny([](Json& t) { t["decoder"] = nullptr; }), "has no decoder"},
      {"Metaspace decoder", WithTiny([](Json& t) {
         t["decoder"] = {{"type", "Metaspace"}, {"replacement", "_"}};
       }),
       "decoder string \"Metaspace\" is not supported"},
      {"Llama 2 style sequence", WithTiny([](Json& t) {
         t["decoder"] = Json::parse(R"({"type": "Sequence", "decoders": [
             {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
             {"type": "ByteFallback"}, {"type": "Fuse"}]})");
       }),
       "\"Sequence\" with string \"Replace\" at decoders[0] is not supported"},
      {"empty sequence", WithTiny([](Json& t) {
         t["decoder"] = {{"type", "Sequence"}, {"decoders", Json::array()}};
       }),
       "needs a non-empty 'decoders' list"},
      {"decoder without type", WithTiny([](Json& t) { t["decoder"] = Json::object(); }),
       "decoder without a 'type' is not supported"},
      {"string id", WithTiny([](Json& t) { t["model"]["vocab"]["a"] = "67"; }),
       "model.vocab[string \"a\"] must be an integer id (got string \"67\")"},
      {"fractional id", WithTiny([](Json& t) { t["model"]["vocab"]["a"] = 67.5; }),
       "must be an integer id"},
      {"negative id", WithTiny([](Json& t) { t["model"]["vocab"]["a"] = -1; }),
       "model.vocab[string \"a\"] is -1, outside [0, 2147483647)"},
      {"id past int32", WithTiny([](Json& t) { t["model"]["vocab"]["a"] = 3000000000LL; }),
       "is 3000000000, outside"},
      {"id INT32_MAX", WithTiny([](Json& t) { t["model"]["vocab"]["a"] = 2147483647; }),
       "is 2147483647, outside"},
      {"id past uint64", R"({"model": {"type": "BPE", "vocab": {"a": 99999999999999999999999}},
                             "decoder": {"type": "ByteLevel"}})",
       "must be an integer id (got number"},
      {"number overflowing a double", R"({"model": {"type": "BPE", "vocab": {"a": 1e999}},
                                          "decoder": {"type": "ByteLevel"}})",
       "malformed JSON"},
      {"two tokens, one id", WithTiny([](Json& t) { t["model"]["vocab"]["a"] = 68; }),
       "model.vocab gives id 68 to two tokens"},
      {"added_tokens not a list", WithTiny([](Json& t) { t["added_tokens"] = Json::object(); }),
       "added_tokens must be a list"},
      {"added token not an object", WithTiny([](Json& t) { t["added_tokens"][1] = 5; }),
       "added_tokens[1] must be an object"},
      {"added token without id", WithTiny([](Json& t) { t["added_tokens"][0].erase("id"); }),
       "added_tokens[0] has no 'id'"},
      {"added token without content",
       WithTiny([](Json& t) { t["added_tokens"][2]["content"] = 7; }),
       "added_tokens[2].content must be a string"},
      {"added token huge id",
       WithTiny([](Json& t) { t["added_tokens"][0]["id"] = 18446744073709551615ULL; }),
       "added_tokens[0].id is 18446744073709551615, outside"},
      {"added token repeated id", WithTiny([](Json& t) { t["added_tokens"][1]["id"] = 0; }),
       "added_tokens[1] repeats id 0"},
      {"special not a bool", WithTiny([](Json& t) { t["added_tokens"][0]["special"] = "yes"; }),
       "added_tokens[0].special must be true or false"},
      {"deeply nested", std::string(100000, '[') + std::string(100000, ']'), "nested"},
      {"deeply nested inside a valid file",
       WithTiny([](Json&) {
       }).insert(1, R"("x": )" + std::string(5000, '[') + std::string(5000, ']') + ","),
       "nested"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = TokenizerDir(c.tokenizer_json);
    absl::StatusOr<TokenizerDecoder> decoder = TokenizerDecoder::Load(dir);
    ASSERT_FALSE(decoder.ok());
    EXPECT_EQ(decoder.status().code(), absl::StatusCode::kInvalidArgument) << decoder.status();
    EXPECT_THAT(decoder.status().message(), HasSubstr(dir + "/tokenizer.json: "));
    EXPECT_THAT(decoder.status().message(), HasSubstr(c.message));
    // Parse() says the same about the text, under the given name.
    absl::StatusOr<TokenizerDecoder> parsed = TokenizerDecoder::Parse(c.tokenizer_json, "", "tj");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("tj: "));
  }
}

TEST(TokenizerDecoderTest, RefusesFilesThatAreNotRegularOrTooLarge) {
  const std::string dir = ScratchDir("tokdec-odd");
  std::filesystem::create_directory(dir + "/tokenizer.json");
  absl::StatusOr<TokenizerDecoder> decoder = TokenizerDecoder::Load(dir);
  EXPECT_EQ(decoder.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoder.status().message(), HasSubstr("tokenizer.json"));

  // Sparse: refused by its size before a byte is read.
  const std::string big = ScratchDir("tokdec-big");
  testing::WriteFile(big + "/tokenizer.json", "{");
  std::filesystem::resize_file(big + "/tokenizer.json", kMaxTokenizerJsonBytes + 1);
  decoder = TokenizerDecoder::Load(big);
  EXPECT_EQ(decoder.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoder.status().message(), HasSubstr("tokenizer.json"));
}

TEST(Utf8LossyTest, KeepsValidTextAndReplacesMaximalIllFormedParts) {
  EXPECT_EQ(Utf8Lossy(""), "");
  EXPECT_EQ(Utf8Lossy("plain \t\n ascii"), "plain \t\n ascii");
  const std::string valid = "h\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x99\x82 \xF4\x8F\xBF\xBF \xEF\xBF\xBD";
  EXPECT_EQ(Utf8Lossy(valid), valid);
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(Utf8Lossy("\x80"), r);
  EXPECT_EQ(Utf8Lossy("\xC3"), r);
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x99"), r);  // a cut 4-byte character
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x99"
                      "a"),
            r + "a");
  EXPECT_EQ(Utf8Lossy("\xE4\xE4\xB8\xAD"), r + "\xE4\xB8\xAD");
  EXPECT_EQ(Utf8Lossy("\xC0\xAF"), r + r);               // overlong: C0 is never valid
  EXPECT_EQ(Utf8Lossy("\xE0\x80\xAF"), r + r + r);       // overlong 3-byte
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), r + r + r);       // surrogate
  EXPECT_EQ(Utf8Lossy("\xED\x9F\xBF"), "\xED\x9F\xBF");  // U+D7FF
  EXPECT_EQ(Utf8Lossy("\xF4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(Utf8Lossy("\xF5\xFF"), r + r);
  EXPECT_EQ(Utf8Lossy(std::string("a\0b", 3)), std::string("a\0b", 3));
}

}  // namespace
}  // namespace sbp
