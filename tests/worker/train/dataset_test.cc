#include "worker/train/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/worker/train/test_util.h"

namespace sbp {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using train_testing::MakeTempDir;
using train_testing::WriteFile;

// EpochOrder(seed, epoch, 10), also computed by an independent Python
// implementation of the documented algorithm.
constexpr int64_t kGoldenSeed1Epoch0[] = {6, 3, 2, 9, 8, 1, 4, 7, 0, 5};
constexpr int64_t kGoldenSeed1Epoch1[] = {0, 6, 1, 3, 8, 2, 9, 5, 4, 7};
constexpr int64_t kGoldenSeed0Epoch0[] = {2, 1, 8, 4, 9, 6, 5, 7, 3, 0};

bool IsPermutation(std::vector<int64_t> order, int64_t size) {
  std::sort(order.begin(), order.end());
  std::vector<int64_t> expected(static_cast<size_t>(size));
  std::iota(expected.begin(), expected.end(), int64_t{0});
  return order == expected;
}

TEST(EpochOrderTest, SplitMix64MatchesTheReference) {
  // First outputs of the reference SplitMix64 generator seeded with 0.
  EXPECT_EQ(SplitMix64Mix(0x9E3779B97F4A7C15ull), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64Mix(0x9E3779B97F4A7C15ull * 2), 0x6E789E6AA1B965F4ull);
}

TEST(EpochOrderTest, PermutationAndDeterministic) {
  for (int64_t size : {1, 2, 3, 10, 257}) {
    for (int64_t epoch : {0, 1, 5}) {
      const std::vector<int64_t> order = EpochOrder(7, epoch, size);
      EXPECT_TRUE(IsPermutation(order, size)) << size << " " << epoch;
      EXPECT_EQ(order, EpochOrder(7, epoch, size));
    }
  }
  EXPECT_TRUE(EpochOrder(1, 0, 0).empty());
  EXPECT_NE(EpochOrder(1, 0, 100), EpochOrder(1, 1, 100));
  EXPECT_NE(EpochOrder(1, 0, 100), EpochOrder(2, 0, 100));
}

TEST(EpochOrderTest, Golden) {
  // Pinned so that a change to the algorithm (which would break resuming old
  // checkpoints bit-identically) fails loudly.
  EXPECT_THAT(EpochOrder(1, 0, 10), ElementsAreArray(kGoldenSeed1Epoch0));
  EXPECT_THAT(EpochOrder(1, 1, 10), ElementsAreArray(kGoldenSeed1Epoch1));
  EXPECT_THAT(EpochOrder(0, 0, 10), ElementsAreArray(kGoldenSeed0Epoch0));
}

TEST(EpochOrderTest, RoughlyUniform) {
  // Where element 0 lands over many epochs: each slot about equally often.
  std::vector<int> counts(4, 0);
  for (int64_t epoch = 0; epoch < 4000; ++epoch) {
    const std::vector<int64_t> order = EpochOrder(3, epoch, 4);
    counts[std::find(order.begin(), order.end(), 0) - order.begin()]++;
  }
  for (int c : counts) EXPECT_NEAR(c, 1000, 120);
}

TEST(DataCursorTest, CrossesEpochBoundaries) {
  DataCursor cursor(5, 11);
  const std::vector<int64_t> e0 = EpochOrder(11, 0, 5);
  const std::vector<int64_t> e1 = EpochOrder(11, 1, 5);
  const std::vector<int64_t> e2 = EpochOrder(11, 2, 5);
  EXPECT_THAT(cursor.Next(3), ElementsAre(e0[0], e0[1], e0[2]));
  EXPECT_EQ(cursor.epoch(), 0);
  EXPECT_EQ(cursor.position(), 3);
  EXPECT_THAT(cursor.Next(3), ElementsAre(e0[3], e0[4], e1[0]));
  EXPECT_EQ(cursor.epoch(), 1);
  EXPECT_EQ(cursor.position(), 1);
  // More than a whole epoch in one call.
  std::vector<int64_t> expected(e1.begin() + 1, e1.end());
  expected.insert(expected.end(), e2.begin(), e2.end());
  expected.push_back(EpochOrder(11, 3, 5)[0]);
  EXPECT_THAT(cursor.Next(10), ElementsAreArray(expected));
  EXPECT_EQ(cursor.epoch(), 3);
  EXPECT_EQ(cursor.position(), 1);
  EXPECT_EQ(cursor.examples_taken(), 16);
  EXPECT_TRUE(cursor.Next(0).empty());
}

TEST(DataCursorTest, EndOfEpochStaysUntilTheNextDraw) {
  DataCursor cursor(4, 1);
  cursor.Next(4);
  EXPECT_EQ(cursor.epoch(), 0);
  EXPECT_EQ(cursor.position(), 4);
  cursor.Next(1);
  EXPECT_EQ(cursor.epoch(), 1);
  EXPECT_EQ(cursor.position(), 1);
}

TEST(DataCursorTest, EveryEpochVisitsEveryExampleOnce) {
  DataCursor cursor(7, 5);
  for (int epoch = 0; epoch < 3; ++epoch) {
    EXPECT_TRUE(IsPermutation(cursor.Next(7), 7));
  }
}

TEST(DataCursorTest, NoShuffleIsFileOrder) {
  DataCursor cursor(3, 99, /*shuffle=*/false);
  EXPECT_THAT(cursor.Next(7), ElementsAre(0, 1, 2, 0, 1, 2, 0));
  EXPECT_EQ(cursor.epoch(), 2);
}

TEST(DataCursorTest, JsonRoundTripResumesExactly) {
  DataCursor cursor(9, 1234567890123ull);
  cursor.Next(13);
  const std::string json = cursor.ToJson();
  EXPECT_THAT(json, HasSubstr("\"epoch\":1"));
  EXPECT_THAT(json, HasSubstr("\"position\":4"));
  absl::StatusOr<DataCursor> restored = DataCursor::FromJson(json, 9, 1234567890123ull);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, cursor);
  EXPECT_EQ(restored->Next(20), cursor.Next(20));
  EXPECT_EQ(restored->ToJson(), cursor.ToJson());
}

TEST(DataCursorTest, FromJsonRejectsAnotherDatasetOrBadText) {
  DataCursor cursor(9, 1);
  cursor.Next(2);
  const std::string json = cursor.ToJson();
  EXPECT_EQ(DataCursor::FromJson(json, 10, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(DataCursor::FromJson(json, 10, 1).status().message(),
              HasSubstr("saved for 9 examples, seed 1"));
  EXPECT_EQ(DataCursor::FromJson(json, 9, 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DataCursor::FromJson(json, 9, 1, false).status().code(),
            absl::StatusCode::kFailedPrecondition);
  for (const std::string& bad :
       {std::string("nope"), std::string("[]"), std::string("{\"epoch\": 1}"),
        absl::StrReplaceAll(json, {{"\"position\":2", "\"position\":10"}}),
        absl::StrReplaceAll(json, {{"\"epoch\":0", "\"epoch\":-1"}}),
        absl::StrReplaceAll(json, {{"\"shuffle\":true", "\"shuffle\":1"}})}) {
    EXPECT_EQ(DataCursor::FromJson(bad, 9, 1).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir("dataset"); }
  std::string Write(absl::string_view name, absl::string_view contents) {
    const std::string path = absl::StrCat(dir_, "/", name);
    WriteFile(path, contents);
    return path;
  }
  std::string dir_;
};

TEST_F(DatasetTest, LoadsEachObjective) {
  const DataOptions options{256, 0, Truncation::kReject};
  absl::StatusOr<Dataset> sft = Dataset::Load(
      Objective::kSft, Write("sft.jsonl", "{\"input_ids\":[1,2,3]}\n{\"input_ids\":[4,5]}\n"),
      options);
  ASSERT_TRUE(sft.ok()) << sft.status();
  EXPECT_EQ(sft->objective(), Objective::kSft);
  EXPECT_EQ(sft->size(), 2);
  EXPECT_EQ(sft->TokenCount(0), 3);
  EXPECT_EQ(sft->sft()[1].input_ids.size(), 2u);

  absl::StatusOr<Dataset> dpo = Dataset::Load(
      Objective::kDpo,
      Write("dpo.jsonl", "{\"prompt_ids\":[1],\"chosen_ids\":[2,3],\"rejected_ids\":[4]}\n"),
      options);
  ASSERT_TRUE(dpo.ok()) << dpo.status();
  EXPECT_EQ(dpo->objective(), Objective::kDpo);
  EXPECT_EQ(dpo->size(), 1);
  EXPECT_EQ(dpo->TokenCount(0), 3 + 2);

  absl::StatusOr<Dataset> grpo =
      Dataset::Load(Objective::kGrpo,
                    Write("grpo.jsonl",
                          "{\"prompt_ids\":[1,2],\"completions\":[{\"ids\":[3],\"reward\":1},"
                          "{\"ids\":[4,5],\"reward\":0}]}\n"),
                    options);
  ASSERT_TRUE(grpo.ok()) << grpo.status();
  EXPECT_EQ(grpo->objective(), Objective::kGrpo);
  EXPECT_EQ(grpo->size(), 1);
  EXPECT_EQ(grpo->TokenCount(0), 3 + 4);
  EXPECT_EQ(grpo->grpo()[0].completions.size(), 2u);

  // The wrong loader for a file names the file and the line.
  absl::StatusOr<Dataset> wrong = Dataset::Load(Objective::kDpo, dir_ + "/sft.jsonl", options);
  EXPECT_THAT(wrong.status().message(), HasSubstr("sft.jsonl:1: missing field 'prompt_ids'"));
}

TEST_F(DatasetTest, LoadForJobUsesSpecPathsAndLimits) {
  Write("d.jsonl", "{\"input_ids\":[1,2,3,4,5]}\n");
  absl::StatusOr<JobSpec> spec =
      ParseJobSpec("name: j\nmodel: m\ndata: d.jsonl\nobjective: sft\nseq_len: 4\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<Dataset> rejected = Dataset::LoadForJob(*spec, dir_, 256);
  EXPECT_THAT(rejected.status().message(), HasSubstr("d.jsonl:1: input_ids has 5 tokens"));
  spec->truncation = Truncation::kTruncate;
  absl::StatusOr<Dataset> truncated = Dataset::LoadForJob(*spec, dir_, 256);
  ASSERT_TRUE(truncated.ok()) << truncated.status();
  EXPECT_EQ(truncated->TokenCount(0), 4);
  const DataOptions options = DataOptionsForJob(*spec, 100);
  EXPECT_EQ(options.vocab_size, 100);
  EXPECT_EQ(options.seq_len, 4);
  EXPECT_EQ(options.truncation, Truncation::kTruncate);
}

TEST_F(DatasetTest, HostileFilesAreErrorsNamingFileAndLine) {
  const DataOptions options{256, 0, Truncation::kReject};
  const std::string fifo = dir_ + "/fifo.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (Objective objective : {Objective::kSft, Objective::kDpo, Objective::kGrpo}) {
    absl::StatusOr<Dataset> got = Dataset::Load(objective, fifo, options);  // never blocks
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(got.status().message(), HasSubstr("fifo.jsonl: is a FIFO, not a regular file"));
  }
  const std::string deep = Write(
      "deep.jsonl", absl::StrCat("\n\n", std::string(200000, '['), std::string(200000, ']'), "\n"));
  absl::StatusOr<Dataset> got = Dataset::Load(Objective::kGrpo, deep, options);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(),
              HasSubstr("deep.jsonl:3: JSON nested deeper than 64 levels (at byte 64)"));
}

TEST(DataCursorTest, FromJsonRejectsCountersBeyondInt64) {
  for (const std::string& bad :
       {std::string("{\"epoch\":18446744073709551615,\"position\":0,\"size\":9,\"seed\":1,"
                    "\"shuffle\":true}"),
        std::string("{\"epoch\":9223372036854775807,\"position\":0,\"size\":9,\"seed\":1,"
                    "\"shuffle\":true}")}) {
    EXPECT_EQ(DataCursor::FromJson(bad, 9, 1).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(DatasetDeathTest, WrongAccessorChecks) {
  Dataset dataset(std::vector<TokenSequence>{TokenSequence{{1, 2}, {1, 2}}});
  EXPECT_EQ(dataset.size(), 1);
  EXPECT_DEATH(dataset.dpo(), "holds sft examples, not dpo");
}

}  // namespace
}  // namespace sbp
