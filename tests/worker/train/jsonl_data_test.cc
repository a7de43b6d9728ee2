#include "worker/train/jsonl_data.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/worker/train/test_util.h"

namespace sbp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using train_testing::MakeTempDir;
using train_testing::WriteFile;

constexpr int32_t kX = kIgnoreIndex;

class JsonlDataTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir("jsonl-data"); }

  // Writes `contents` to dir/data.jsonl and returns the path.
  std::string Write(absl::string_view contents, absl::string_view name = "data.jsonl") {
    const std::string path = absl::StrCat(dir_, "/", name);
    WriteFile(path, contents);
    return path;
  }

  DataOptions Options(int64_t seq_len = 0, Truncation truncation = Truncation::kReject) {
    return DataOptions{256, seq_len, truncation};
  }

  // The error of loading `contents` as `objective` data; expects a failure.
  std::string SftError(absl::string_view contents, DataOptions options = {256, 0}) {
    absl::StatusOr<std::vector<TokenSequence>> got = LoadSftJsonl(Write(contents), options);
    EXPECT_FALSE(got.ok()) << contents;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    return std::string(got.status().message());
  }
  std::string DpoError(absl::string_view contents, DataOptions options = {256, 0}) {
    absl::StatusOr<std::vector<DpoPair>> got = LoadDpoJsonl(Write(contents), options);
    EXPECT_FALSE(got.ok()) << contents;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    return std::string(got.status().message());
  }
  std::string GrpoError(absl::string_view contents, DataOptions options = {256, 0}) {
    absl::StatusOr<std::vector<GrpoGroup>> got = LoadGrpoJsonl(Write(contents), options);
    EXPECT_FALSE(got.ok()) << contents;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    return std::string(got.status().message());
  }

  std::string dir_;
};

TEST_F(JsonlDataTest, SftFormats) {
  const std::string path = Write(
      "{\"input_ids\": [1, 2, 3], \"labels\": [-100, 2, 3]}\n"
      "\n"
      "   \n"
      "{\"input_ids\": [4, 5], \"note\": \"extra fields are ignored\"}\r\n"
      "{\"prompt_ids\": [7, 8], \"completion_ids\": [9, 10, 255]}\n");
  absl::StatusOr<std::vector<TokenSequence>> got = LoadSftJsonl(path, Options());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 3u);
  EXPECT_THAT((*got)[0].input_ids, ElementsAre(1, 2, 3));
  EXPECT_THAT((*got)[0].labels, ElementsAre(kX, 2, 3));
  EXPECT_THAT((*got)[1].input_ids, ElementsAre(4, 5));
  EXPECT_THAT((*got)[1].labels, ElementsAre(4, 5));
  EXPECT_THAT((*got)[2].input_ids, ElementsAre(7, 8, 9, 10, 255));
  EXPECT_THAT((*got)[2].labels, ElementsAre(kX, kX, 9, 10, 255));
}

TEST_F(JsonlDataTest, LinesWithoutTargetsAreKept) {
  // A one-token sequence has no target; the engine goldens use one.
  absl::StatusOr<std::vector<TokenSequence>> got =
      LoadSftJsonl(Write("{\"input_ids\": [1, 2]}\n{\"input_ids\": [7]}\n"), Options());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 2u);
  EXPECT_THAT((*got)[1].labels, ElementsAre(7));
}

TEST_F(JsonlDataTest, LegacySignaturesStillWork) {
  absl::StatusOr<TokenSequence> line = ParseSftLine("{\"input_ids\": [1, 2]}", 3, "x:1");
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_THAT(line->labels, ElementsAre(1, 2));
  EXPECT_THAT(ParseSftLine("{\"input_ids\": [1, 3]}", 3, "x:1").status().message(),
              HasSubstr("x:1: input_ids[1] = 3 is outside the vocabulary [0, 3)"));
  absl::StatusOr<std::vector<TokenSequence>> file =
      LoadSftJsonl(Write(std::string(300, ' ') + "\n{\"input_ids\": [1, 2, 3, 4]}\n"), 5);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size(), 1u);
}

TEST_F(JsonlDataTest, DpoPairsMaskThePrompt) {
  const std::string path =
      Write("{\"prompt_ids\": [1, 2], \"chosen_ids\": [3, 4, 5], \"rejected_ids\": [6]}\n");
  absl::StatusOr<std::vector<DpoPair>> got = LoadDpoJsonl(path, Options());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  const DpoPair& pair = (*got)[0];
  EXPECT_THAT(pair.chosen.input_ids, ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(pair.chosen.labels, ElementsAre(kX, kX, 3, 4, 5));
  EXPECT_THAT(pair.rejected.input_ids, ElementsAre(1, 2, 6));
  EXPECT_THAT(pair.rejected.labels, ElementsAre(kX, kX, 6));
}

TEST_F(JsonlDataTest, GrpoGroups) {
  const std::string path = Write(
      "{\"prompt_ids\": [1, 2], \"completions\": ["
      "{\"ids\": [3, 4], \"reward\": 1.0, \"old_logprobs\": [-0.5, -1.25]},"
      "{\"ids\": [5], \"reward\": -2}]}\n");
  absl::StatusOr<std::vector<GrpoGroup>> got = LoadGrpoJsonl(path, Options());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  const GrpoGroup& g = (*got)[0];
  EXPECT_THAT(g.prompt, ElementsAre(1, 2));
  ASSERT_EQ(g.completions.size(), 2u);
  EXPECT_THAT(g.completions[0].ids, ElementsAre(3, 4));
  EXPECT_EQ(g.completions[0].reward, 1.0);
  EXPECT_THAT(g.completions[0].old_logprobs, ElementsAre(-0.5f, -1.25f));
  EXPECT_THAT(g.completions[1].ids, ElementsAre(5));
  EXPECT_EQ(g.completions[1].reward, -2.0);
  EXPECT_TRUE(g.completions[1].old_logprobs.empty());
  const TokenSequence s = GrpoSequence(g, 0);
  EXPECT_THAT(s.input_ids, ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(s.labels, ElementsAre(kX, kX, 3, 4));
}

TEST_F(JsonlDataTest, ErrorsNameFileLineAndField) {
  // Line numbers count blank lines.
  std::string msg = SftError("{\"input_ids\": [1, 2]}\n\n{\"input_ids\": [1, 300]}\n");
  EXPECT_THAT(msg,
              HasSubstr("data.jsonl:3: input_ids[1] = 300 is outside the vocabulary [0, 256)"));
  EXPECT_THAT(msg, HasSubstr(dir_));

  EXPECT_THAT(SftError("{\"input_ids\": [1, 2}\n"), HasSubstr("data.jsonl:1: not valid JSON"));
  EXPECT_THAT(SftError("[1, 2]\n"), HasSubstr("data.jsonl:1: expected a JSON object, got array"));
  EXPECT_THAT(
      SftError("{\"input_ids\": \"1 2\"}\n"),
      HasSubstr("data.jsonl:1: field 'input_ids' must be an array of integers, got string"));
  EXPECT_THAT(SftError("{\"input_ids\": [1, 2.5]}\n"),
              HasSubstr("data.jsonl:1: input_ids[1] must be an integer, got 2.5"));
  EXPECT_THAT(SftError("{\"input_ids\": [1, \"a\"]}\n"),
              HasSubstr("input_ids[1] must be an integer, got \"a\""));
  EXPECT_THAT(SftError("{\"labels\": [1, 2]}\n"),
              HasSubstr("data.jsonl:1: missing field 'input_ids'"));
  EXPECT_THAT(SftError("{\"input_ids\": [1, -100, 2]}\n"),
              HasSubstr("input_ids[1] = -100 is outside the vocabulary [0, 256) (-100 is only "
                        "allowed in labels)"));
  EXPECT_THAT(SftError("{\"input_ids\": [1, -1]}\n"),
              HasSubstr("input_ids[1] = -1 is outside the vocabulary"));
  EXPECT_THAT(SftError("{\"input_ids\": [1, 18446744073709551615]}\n"),
              HasSubstr("input_ids[1] = 18446744073709551615 is outside the vocabulary"));
  EXPECT_THAT(SftError("{\"input_ids\": [1, 2], \"labels\": [1, 256]}\n"),
              HasSubstr("labels[1] = 256 is neither -100 nor in [0, 256)"));
  EXPECT_THAT(SftError("{\"input_ids\": [1, 2], \"labels\": [1]}\n"),
              HasSubstr("field 'labels' has 1 entries but 'input_ids' has 2"));
  EXPECT_THAT(SftError("{\"input_ids\": []}\n"), HasSubstr("field 'input_ids' is empty"));
  EXPECT_THAT(SftError("{\"input_ids\": [1, 2], \"labels\": [1, -100]}\n{\"input_ids\": [7]}\n"),
              HasSubstr("data.jsonl: no token has a loss"));
  EXPECT_THAT(SftError("{\"prompt_ids\": [1]}\n"),
              HasSubstr("data.jsonl:1: missing field 'completion_ids'"));
  EXPECT_THAT(SftError("{\"input_ids\": [1, 2], \"prompt_ids\": [1], \"completion_ids\": [2]}\n"),
              HasSubstr("has both 'input_ids' and prompt_ids/completion_ids"));
  EXPECT_THAT(SftError("{\"prompt_ids\": [1], \"chosen_ids\": [2], \"rejected_ids\": [3]}\n"),
              HasSubstr("missing field 'completion_ids' (this line looks like DPO data, the "
                        "loader expects SFT)"));
}

TEST_F(JsonlDataTest, DpoErrors) {
  EXPECT_THAT(
      DpoError("{\"prompt_ids\": [1], \"chosen_ids\": \"x\", \"rejected_ids\": [3]}\n"),
      HasSubstr("data.jsonl:1: field 'chosen_ids' must be an array of integers, got string"));
  EXPECT_THAT(DpoError("{\"prompt_ids\": [1], \"chosen_ids\": [2]}\n"),
              HasSubstr("data.jsonl:1: missing field 'rejected_ids'"));
  EXPECT_THAT(DpoError("{\"prompt_ids\": [1], \"chosen_ids\": [2], \"rejected_ids\": []}\n"),
              HasSubstr("field 'rejected_ids' is empty"));
  EXPECT_THAT(DpoError("{\"prompt_ids\": [], \"chosen_ids\": [2], \"rejected_ids\": [3]}\n"),
              HasSubstr("field 'prompt_ids' is empty"));
  EXPECT_THAT(DpoError("{\"prompt_ids\": [1], \"chosen_ids\": [2], \"rejected_ids\": [999]}\n"),
              HasSubstr("rejected_ids[0] = 999 is outside the vocabulary [0, 256)"));
  EXPECT_THAT(DpoError("{\"input_ids\": [1, 2]}\n"),
              HasSubstr("missing field 'prompt_ids' (this line looks like SFT data"));
}

TEST_F(JsonlDataTest, GrpoErrors) {
  const std::string p = "{\"prompt_ids\": [1], ";
  EXPECT_THAT(GrpoError(p + "\"completions\": [{\"ids\": [2], \"reward\": 1e999}]}\n"),
              HasSubstr("data.jsonl:1: not valid JSON"));
  EXPECT_THAT(GrpoError(p + "\"completions\": [{\"ids\": [2], \"reward\": \"high\"}]}\n"),
              HasSubstr("field 'completions[0].reward' must be a number, got string"));
  EXPECT_THAT(GrpoError(p + "\"completions\": [{\"ids\": [2]}]}\n"),
              HasSubstr("completions[0]: missing field 'reward'"));
  EXPECT_THAT(GrpoError(p + "\"completions\": [{\"reward\": 1}]}\n"),
              HasSubstr("completions[0]: missing field 'ids'"));
  EXPECT_THAT(GrpoError(p + "\"completions\": []}\n"),
              HasSubstr("field 'completions' must be a non-empty array of objects, got an empty "
                        "array"));
  EXPECT_THAT(GrpoError(p + "\"completions\": {}}\n"),
              HasSubstr("field 'completions' must be a non-empty array of objects, got object"));
  EXPECT_THAT(GrpoError(p + "\"completions\": [[2]]}\n"),
              HasSubstr("field 'completions[0]' must be an object, got array"));
  EXPECT_THAT(GrpoError(p + "\"completions\": [{\"ids\": [2], \"reward\": 0}, "
                            "{\"ids\": [], \"reward\": 0}]}\n"),
              HasSubstr("field 'completions[1].ids' is empty"));
  EXPECT_THAT(GrpoError(p + "\"completions\": [{\"ids\": [2, 256], \"reward\": 0}]}\n"),
              HasSubstr("completions[0].ids[1] = 256 is outside the vocabulary [0, 256)"));
  EXPECT_THAT(GrpoError(p + "\"completions\": [{\"ids\": [2, 3], \"reward\": 0, "
                            "\"old_logprobs\": [-1]}]}\n"),
              HasSubstr("field 'completions[0].old_logprobs' has 1 entries but "
                        "'completions[0].ids' has 2"));
  EXPECT_THAT(GrpoError(p + "\"completions\": [{\"ids\": [2], \"reward\": 0, "
                            "\"old_logprobs\": [0.7]}]}\n"),
              HasSubstr("completions[0].old_logprobs[0] = 0.7 is not a log-probability"));
  EXPECT_THAT(GrpoError(p + "\"completions\": [{\"ids\": [2], \"reward\": 0, "
                            "\"old_logprobs\": [null]}]}\n"),
              HasSubstr("completions[0].old_logprobs[0] must be a number, got null"));
  EXPECT_THAT(GrpoError("{\"prompt_ids\": [1]}\n"), HasSubstr("missing field 'completions'"));
}

TEST_F(JsonlDataTest, NonFiniteRewardFromHugeNumber) {
  // JSON has no NaN or Infinity literals; an overflowing number is the only
  // way to spell one and is refused like any other bad token.
  const std::string msg =
      GrpoError("{\"prompt_ids\": [1], \"completions\": [{\"ids\": [2], \"reward\": -1e400}]}\n");
  EXPECT_THAT(msg, HasSubstr("data.jsonl:1:"));
  EXPECT_THAT(msg, HasSubstr("overflow"));
}

TEST_F(JsonlDataTest, FileLevelErrors) {
  absl::StatusOr<std::vector<TokenSequence>> missing =
      LoadSftJsonl(dir_ + "/missing.jsonl", Options());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("missing.jsonl' does not exist"));

  EXPECT_THAT(LoadSftJsonl(dir_, Options()).status().message(), HasSubstr("is a directory"));

  EXPECT_THAT(SftError(""), HasSubstr("data.jsonl: no examples"));
  EXPECT_THAT(SftError("\n  \n\t\n"), HasSubstr("data.jsonl: no examples"));
  EXPECT_THAT(DpoError(""), HasSubstr("no examples"));
  EXPECT_THAT(GrpoError("\n"), HasSubstr("no examples"));

  // A truncated last line (no newline, cut mid-array).
  EXPECT_THAT(SftError("{\"input_ids\": [1, 2]}\n{\"input_ids\": [1, 2"),
              HasSubstr("data.jsonl:2: not valid JSON"));
  // Invalid UTF-8 inside and outside strings; the message itself stays ASCII.
  const std::string bad_string = SftError("{\"input_ids\": [1, 2], \"text\": \"\xff\xfe\"}\n");
  EXPECT_THAT(bad_string, HasSubstr("data.jsonl:1: not valid JSON"));
  const std::string bad_bytes = SftError("\xc3\x28{\"input_ids\": [1, 2]}\n");
  EXPECT_THAT(bad_bytes, HasSubstr("data.jsonl:1: not valid JSON"));
  for (const std::string& m : {bad_string, bad_bytes}) {
    for (char c : m) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << m;
  }
  // Nothing is returned when a later line is bad.
  EXPECT_THAT(SftError("{\"input_ids\": [1, 2]}\n{\"input_ids\": [1, 2]}\n{}\n"),
              HasSubstr("data.jsonl:3: missing field 'input_ids'"));
}

TEST_F(JsonlDataTest, Utf8BomIsSkipped) {
  absl::StatusOr<std::vector<TokenSequence>> got =
      LoadSftJsonl(Write("\xEF\xBB\xBF{\"input_ids\": [1, 2]}\n"), Options());
  ASSERT_TRUE(got.ok()) << got.status();
}

TEST_F(JsonlDataTest, OverLongSftRejectedOrTruncated) {
  const std::string data =
      "{\"input_ids\": [1, 2, 3, 4, 5, 6], \"labels\": [-100, 2, 3, 4, 5, 6]}\n"
      "{\"prompt_ids\": [1, 2, 3], \"completion_ids\": [4, 5, 6]}\n"
      "{\"input_ids\": [1, 2, 3, 4]}\n";
  EXPECT_THAT(SftError(data, Options(4)),
              HasSubstr("data.jsonl:1: input_ids has 6 tokens, longer than seq_len 4"));
  absl::StatusOr<std::vector<TokenSequence>> got =
      LoadSftJsonl(Write(data), Options(4, Truncation::kTruncate));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 3u);
  EXPECT_THAT((*got)[0].input_ids, ElementsAre(1, 2, 3, 4));
  EXPECT_THAT((*got)[0].labels, ElementsAre(kX, 2, 3, 4));
  EXPECT_THAT((*got)[1].input_ids, ElementsAre(1, 2, 3, 4));
  EXPECT_THAT((*got)[1].labels, ElementsAre(kX, kX, kX, 4));
  EXPECT_THAT((*got)[2].input_ids, ElementsAre(1, 2, 3, 4));  // exactly seq_len: kept whole

  EXPECT_THAT(SftError("{\"prompt_ids\": [1, 2, 3], \"completion_ids\": [4, 5, 6]}\n", Options(5)),
              HasSubstr("data.jsonl:1: prompt_ids + completion_ids has 6 tokens (3 + 3), longer "
                        "than seq_len 5"));
  EXPECT_THAT(SftError("{\"prompt_ids\": [1, 2, 3], \"completion_ids\": [4]}\n",
                       Options(3, Truncation::kTruncate)),
              HasSubstr("prompt_ids has 3 tokens, which leaves no room for completion_ids within "
                        "seq_len 3"));
  // Truncation that cuts every label of the file is an error too.
  EXPECT_THAT(SftError("{\"input_ids\": [1, 2, 3], \"labels\": [-100, -100, 3]}\n",
                       Options(2, Truncation::kTruncate)),
              HasSubstr("no token has a loss"));
}

TEST_F(JsonlDataTest, OverLongDpoAndGrpo) {
  const std::string dpo =
      "{\"prompt_ids\": [1, 2], \"chosen_ids\": [3, 4, 5], "
      "\"rejected_ids\": [6, 7]}\n";
  EXPECT_THAT(DpoError(dpo, Options(4)),
              HasSubstr("data.jsonl:1: prompt_ids + chosen_ids has 5 tokens (2 + 3), longer than "
                        "seq_len 4"));
  absl::StatusOr<std::vector<DpoPair>> pairs =
      LoadDpoJsonl(Write(dpo), Options(3, Truncation::kTruncate));
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_THAT((*pairs)[0].chosen.input_ids, ElementsAre(1, 2, 3));
  EXPECT_THAT((*pairs)[0].rejected.input_ids, ElementsAre(1, 2, 6));
  EXPECT_THAT((*pairs)[0].rejected.labels, ElementsAre(kX, kX, 6));

  const std::string grpo =
      "{\"prompt_ids\": [1, 2], \"completions\": [{\"ids\": [3, 4, 5], \"reward\": 0.5, "
      "\"old_logprobs\": [-1, -2, -3]}, {\"ids\": [6], \"reward\": 0}]}\n";
  EXPECT_THAT(GrpoError(grpo, Options(4)),
              HasSubstr("data.jsonl:1: prompt_ids + completions[0].ids has 5 tokens (2 + 3), "
                        "longer than seq_len 4"));
  absl::StatusOr<std::vector<GrpoGroup>> groups =
      LoadGrpoJsonl(Write(grpo), Options(4, Truncation::kTruncate));
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_THAT((*groups)[0].completions[0].ids, ElementsAre(3, 4));
  EXPECT_THAT((*groups)[0].completions[0].old_logprobs, ElementsAre(-1.0f, -2.0f));
  EXPECT_THAT((*groups)[0].completions[1].ids, ElementsAre(6));
  EXPECT_THAT(GrpoError(grpo, Options(2, Truncation::kTruncate)),
              HasSubstr("prompt_ids has 2 tokens, which leaves no room for completions within "
                        "seq_len 2"));
}

TEST_F(JsonlDataTest, LongLines) {
  constexpr int kTokens = 100000;
  std::vector<int> ids(kTokens);
  for (int i = 0; i < kTokens; ++i) ids[i] = (i * 7) % 256;
  const std::string line = absl::StrCat("{\"input_ids\": [", absl::StrJoin(ids, ","), "]}\n");
  absl::StatusOr<std::vector<TokenSequence>> got =
      LoadSftJsonl(Write(absl::StrCat(line, line)), Options(kTokens));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[1].input_ids.size(), static_cast<size_t>(kTokens));
  EXPECT_EQ((*got)[1].input_ids[kTokens - 1], ((kTokens - 1) * 7) % 256);
  // An error deep in a long line names the position.
  ids[kTokens - 2] = 256;
  EXPECT_THAT(SftError(absl::StrCat("{\"input_ids\": [", absl::StrJoin(ids, ","), "]}\n")),
              HasSubstr("input_ids[99998] = 256 is outside the vocabulary"));
}

TEST_F(JsonlDataTest, VocabSizeMustBePositive) {
  absl::StatusOr<TokenSequence> got = ParseSftLine("{\"input_ids\": [1, 2]}", DataOptions{}, "x");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("vocab_size must be positive"));
}

TEST_F(JsonlDataTest, DeeplyNestedLineIsAnErrorNotACrash) {
  // 200,000 levels: printing or copying the value would overflow the stack.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const std::string contents =
      absl::StrCat("{\"input_ids\": [1, 2]}\n{\"input_ids\": [", deep, "]}\n");
  EXPECT_EQ(SftError(contents),
            dir_ + "/data.jsonl:2: JSON nested deeper than 64 levels (at byte 77)");
  EXPECT_THAT(DpoError(absl::StrCat(deep, "\n")),
              HasSubstr("data.jsonl:1: JSON nested deeper than 64 levels"));
  EXPECT_THAT(GrpoError(absl::StrCat("{\"completions\": [{\"ids\": ", deep, "}]}\n")),
              HasSubstr("data.jsonl:1: JSON nested deeper than 64 levels"));
  // The line parsers check too (the fuzzer calls them directly).
  absl::StatusOr<TokenSequence> line =
      ParseSftLine(absl::StrCat("{\"input_ids\": ", deep, "}"), Options(), "x:3");
  EXPECT_EQ(line.status().message(), "x:3: JSON nested deeper than 64 levels (at byte 77)");
  // Nesting the formats do not use is still a field error, named as usual.
  EXPECT_THAT(SftError("{\"input_ids\": [[[1]]]}\n"),
              HasSubstr("data.jsonl:1: input_ids[0] must be an integer, got [[1]]"));
}

TEST_F(JsonlDataTest, OverlongLineIsRefusedAtTheLimit) {
  // A line of kMaxJsonlLineBytes + 1 bytes; the file is read a block at a
  // time and never held whole.
  std::string big = "{\"input_ids\": [1], \"pad\": \"";
  big.append(static_cast<size_t>(kMaxJsonlLineBytes) - big.size() - 1, 'x');
  big += "\"}";
  ASSERT_EQ(big.size(), static_cast<size_t>(kMaxJsonlLineBytes) + 1);
  EXPECT_EQ(SftError(absl::StrCat("{\"input_ids\": [1, 2]}\n", big, "\n")),
            dir_ + "/data.jsonl:2: line is longer than the 64 MiB limit for a JSONL line");
  // Exactly at the limit is read.
  big.erase(big.size() - 3, 1);
  absl::StatusOr<std::vector<TokenSequence>> got =
      LoadSftJsonl(Write(absl::StrCat(big, "\n{\"input_ids\": [3, 4]}")), Options());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 2u);
  EXPECT_THAT(ParseSftLine(absl::StrCat(big, "xx"), Options(), "x:1").status().message(),
              HasSubstr("x:1: line is longer than the 64 MiB limit"));
}

TEST_F(JsonlDataTest, SparseFileWithoutNewlinesStopsAtTheLineLimit) {
  const std::string path = Write("{");
  std::filesystem::resize_file(path, uint64_t{20} << 30);  // 20 GiB of NUL bytes
  absl::StatusOr<std::vector<TokenSequence>> got = LoadSftJsonl(path, Options());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status().message(),
            path + ":1: line is longer than the 64 MiB limit for a JSONL line");
}

TEST_F(JsonlDataTest, OnlyRegularFilesAreRead) {
  const std::string fifo = dir_ + "/fifo.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  absl::StatusOr<std::vector<TokenSequence>> got = LoadSftJsonl(fifo, Options());  // no blocking
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status().message(),
            fifo + ": is a FIFO, not a regular file (only regular files are read)");
  std::filesystem::create_symlink("/dev/zero", dir_ + "/zero.jsonl");
  EXPECT_THAT(LoadDpoJsonl(dir_ + "/zero.jsonl", Options()).status().message(),
              HasSubstr("zero.jsonl: is a character device, not a regular file"));
}

TEST_F(JsonlDataTest, LinesSplitAcrossReadBlocks) {
  // Lines longer than the 1 MiB read block, and many short ones, come out whole.
  std::vector<int> ids(300000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i % 256);
  const std::string long_line = absl::StrCat("{\"input_ids\": [", absl::StrJoin(ids, ","), "]}");
  std::string contents;
  for (int i = 0; i < 3; ++i) absl::StrAppend(&contents, long_line, "\n");
  for (int i = 0; i < 100000; ++i) absl::StrAppend(&contents, "{\"input_ids\": [", i % 256, "]}\n");
  absl::StrAppend(&contents, "{\"input_ids\": [7, 8]}");  // no final newline
  absl::StatusOr<std::vector<TokenSequence>> got = LoadSftJsonl(Write(contents), Options());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 100004u);
  EXPECT_EQ((*got)[2].input_ids.size(), ids.size());
  EXPECT_EQ((*got)[2].input_ids.back(), ids.back());
  EXPECT_EQ((*got)[3 + 99999].input_ids, std::vector<int32_t>{99999 % 256});
  EXPECT_EQ(got->back().input_ids, (std::vector<int32_t>{7, 8}));
  // Line numbers count every line, blank ones included.
  EXPECT_THAT(SftError(absl::StrCat(contents, "\n\n{\"input_ids\": [999]}\n")),
              HasSubstr("data.jsonl:100006: input_ids[0] = 999 is outside the vocabulary"));
}

}  // namespace
}  // namespace sbp
