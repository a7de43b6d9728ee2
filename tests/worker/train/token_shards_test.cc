// Token shards: every objective's examples come back exactly as the same
// token JSONL gives them (seq_len truncation included), the shard that the
// Python `sbp data prepare --shards` wrote equals its token JSONL, and every
// kind of damage is a clear InvalidArgument naming the file.
#include "worker/train/token_shards.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/worker/train/test_util.h"
#include "worker/model/file_util.h"
#include "worker/train/dataset.h"

namespace sbp {
namespace {

using ::testing::HasSubstr;
using train_testing::MakeTempDir;
using train_testing::WriteFile;

constexpr int64_t kVocab = 256;

bool Same(const TokenSequence& a, const TokenSequence& b) {
  return a.input_ids == b.input_ids && a.labels == b.labels;
}

// Loads `jsonl` both ways (JSONL, and shards written from it) and compares.
void ExpectSameBothWays(Objective objective, const std::string& jsonl, const DataOptions& options,
                        const DataOptions& write_options) {
  const std::string dir = MakeTempDir("shards");
  const std::string source = dir + "/data.jsonl", shard = dir + "/data.shard";
  WriteFile(source, jsonl);
  // Shards keep the full examples; the job's options apply when reading.
  absl::StatusOr<Dataset> full = Dataset::Load(objective, source, write_options);
  ASSERT_TRUE(full.ok()) << full.status();
  switch (objective) {
    case Objective::kSft:
      ASSERT_TRUE(WriteTokenShards(shard, full->sft(), kVocab).ok());
      break;
    case Objective::kDpo:
      ASSERT_TRUE(WriteTokenShards(shard, full->dpo(), kVocab).ok());
      break;
    case Objective::kGrpo:
      ASSERT_TRUE(WriteTokenShards(shard, full->grpo(), kVocab).ok());
      break;
  }
  absl::StatusOr<Dataset> a = Dataset::Load(objective, source, options);
  absl::StatusOr<Dataset> b = Dataset::Load(objective, shard, options);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(a->is_shards());
  EXPECT_TRUE(b->is_shards());
  ASSERT_EQ(a->size(), b->size());
  for (int64_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ(a->TokenCount(i), b->TokenCount(i)) << i;
    switch (objective) {
      case Objective::kSft:
        EXPECT_TRUE(Same(a->SftAt(i), b->SftAt(i))) << i;
        break;
      case Objective::kDpo:
        EXPECT_TRUE(Same(a->DpoAt(i).chosen, b->DpoAt(i).chosen)) << i;
        EXPECT_TRUE(Same(a->DpoAt(i).rejected, b->DpoAt(i).rejected)) << i;
        break;
      case Objective::kGrpo: {
        const GrpoGroup x = a->GrpoAt(i), y = b->GrpoAt(i);
        EXPECT_EQ(x.prompt, y.prompt) << i;
        ASSERT_EQ(x.completions.size(), y.completions.size()) << i;
        for (size_t c = 0; c < x.completions.size(); ++c) {
          EXPECT_EQ(x.completions[c].ids, y.completions[c].ids) << i;
          EXPECT_EQ(x.completions[c].reward, y.completions[c].reward) << i;
          EXPECT_EQ(x.completions[c].old_logprobs, y.completions[c].old_logprobs) << i;
        }
        break;
      }
    }
  }
}

const DataOptions kNoLimit{kVocab, 0, Truncation::kReject};

TEST(TokenShardsTest, SftMatchesJsonl) {
  const std::string jsonl =
      "{\"input_ids\":[1,2,3,4,5,6]}\n"
      "{\"input_ids\":[7,8,9,10],\"labels\":[-100,-100,9,10]}\n"
      "{\"input_ids\":[1,2,3,4,5],\"labels\":[1,-100,3,-100,5]}\n"
      "{\"prompt_ids\":[1,2,3],\"completion_ids\":[4,5,6,7]}\n";
  ExpectSameBothWays(Objective::kSft, jsonl, kNoLimit, kNoLimit);
  ExpectSameBothWays(Objective::kSft, jsonl, {kVocab, 5, Truncation::kTruncate}, kNoLimit);
}

TEST(TokenShardsTest, DpoMatchesJsonl) {
  const std::string jsonl =
      "{\"prompt_ids\":[1,2],\"chosen_ids\":[3,4,5],\"rejected_ids\":[6]}\n"
      "{\"prompt_ids\":[9,9,9],\"chosen_ids\":[3],\"rejected_ids\":[6,7,8,9]}\n";
  ExpectSameBothWays(Objective::kDpo, jsonl, kNoLimit, kNoLimit);
  ExpectSameBothWays(Objective::kDpo, jsonl, {kVocab, 4, Truncation::kTruncate}, kNoLimit);
}

TEST(TokenShardsTest, GrpoMatchesJsonl) {
  const std::string jsonl =
      "{\"prompt_ids\":[1,2],\"completions\":[{\"ids\":[3,4,5],\"reward\":0.5},"
      "{\"ids\":[6],\"reward\":-1,\"old_logprobs\":[-0.25]}]}\n"
      "{\"prompt_ids\":[7],\"completions\":[{\"ids\":[8,9,10,11],\"reward\":1,"
      "\"old_logprobs\":[-1,-2,-3,-4]}]}\n";
  ExpectSameBothWays(Objective::kGrpo, jsonl, kNoLimit, kNoLimit);
  ExpectSameBothWays(Objective::kGrpo, jsonl, {kVocab, 3, Truncation::kTruncate}, kNoLimit);
}

TEST(TokenShardsTest, LabelsOtherThanTheIdsCannotBeStored) {
  const std::string path = MakeTempDir("shards") + "/x.shard";
  TokenSequence s{{1, 2, 3}, {1, 7, 3}};
  absl::Status status = WriteTokenShards(path, std::vector<TokenSequence>{s}, kVocab);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("labels[1] = 7"));
}

// The chat example as `sbp data prepare` wrote it, as shards and as token
// JSONL (tools/data_prepare; README "Data"): the same examples.
TEST(TokenShardsTest, PreparedShardsEqualPreparedJsonl) {
  const std::string root = train_testing::SourceDir() + "/examples/data/";
  const DataOptions options{512, 0, Truncation::kReject};
  absl::StatusOr<Dataset> shards =
      Dataset::Load(Objective::kSft, root + "tiny-chat.shard", options);
  absl::StatusOr<Dataset> jsonl =
      Dataset::Load(Objective::kSft, root + "tiny-chat.tokens.jsonl", options);
  ASSERT_TRUE(shards.ok()) << shards.status();
  ASSERT_TRUE(jsonl.ok()) << jsonl.status();
  ASSERT_TRUE(shards->is_shards());
  ASSERT_EQ(shards->size(), jsonl->size());
  for (int64_t i = 0; i < shards->size(); ++i) {
    EXPECT_TRUE(Same(shards->SftAt(i), jsonl->SftAt(i))) << "example " << i;
  }
}

// Resident bytes of this process (/proc/self/statm).
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

// A 64 MiB shard (32768 examples of 1024 tokens), written directly: opening
// it checks every token, and what stays resident is the index, not the tokens.
TEST(TokenShardsTest, MemoryDoesNotGrowWithTheDataset) {
  const std::string path = MakeTempDir("big") + "/big.shard";
  const uint64_t examples = 32768, per_example = 1024, tokens = examples * per_example;
  {
    std::ofstream out(path, std::ios::binary);
    auto put = [&out](auto value) {
      out.write(reinterpret_cast<const char*>(&value), sizeof(value));
    };
    out.write(kTokenShardMagic, 8);
    put(kTokenShardVersion);
    put(uint32_t{0});  // sft
    put(uint32_t{2});  // uint16 ids
    put(uint32_t{0});
    put(examples);
    put(examples);  // one span each
    put(tokens);
    put(uint64_t{0});
    put(uint64_t{0});
    const std::vector<uint16_t> block(per_example, 7);
    for (uint64_t i = 0; i < examples; ++i) {
      out.write(reinterpret_cast<const char*>(block.data()), per_example * 2);
    }
    for (uint64_t i = 0; i <= examples; ++i) put(i);
    for (uint64_t i = 0; i <= examples; ++i) put(i * per_example);
    for (uint64_t i = 0; i < examples; ++i) put(0.0);
    for (uint64_t i = 0; i < examples; ++i) put(uint8_t{1});
    ASSERT_TRUE(out.good());
  }
  const int64_t before = ResidentBytes();
  absl::StatusOr<std::shared_ptr<const TokenShards>> shards =
      TokenShards::Open(path, Objective::kSft, kNoLimit);
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ((*shards)->total_tokens(), static_cast<int64_t>(tokens));
  const TokenSequence last = (*shards)->Sft(examples - 1);
  EXPECT_EQ(last.input_ids.size(), per_example);
  EXPECT_EQ(last.input_ids.back(), 7);
  const int64_t grown = ResidentBytes() - before;
  EXPECT_LT(grown, int64_t{8} << 20) << "resident memory grew by " << grown << " bytes";
}

// ---------------------------------------------------------------------------
// Damage

class CorruptShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("corrupt");
    std::vector<TokenSequence> sft = {{{1, 2, 3, 4}, {-100, -100, 3, 4}}, {{5, 6}, {5, 6}}};
    ASSERT_TRUE(WriteTokenShards(dir_ + "/good.shard", sft, kVocab).ok());
    absl::StatusOr<std::string> bytes = ReadFileToString(dir_ + "/good.shard");
    ASSERT_TRUE(bytes.ok());
    good_ = *bytes;
  }

  // Opens `bytes` written to a file; returns the error message.
  std::string Error(const std::string& bytes, Objective objective = Objective::kSft,
                    DataOptions options = kNoLimit) {
    const std::string path = dir_ + "/bad.shard";
    WriteFile(path, bytes);
    absl::StatusOr<std::shared_ptr<const TokenShards>> opened =
        TokenShards::Open(path, objective, options);
    EXPECT_FALSE(opened.ok());
    if (opened.ok()) return "";
    EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument) << opened.status();
    EXPECT_THAT(opened.status().message(), HasSubstr(path));
    return std::string(opened.status().message());
  }

  template <typename T>
  std::string With(size_t offset, T value) {
    std::string bytes = good_;
    std::memcpy(bytes.data() + offset, &value, sizeof(T));
    return bytes;
  }

  std::string dir_;
  std::string good_;
};

TEST_F(CorruptShardTest, GoodFileOpens) {
  absl::StatusOr<std::shared_ptr<const TokenShards>> opened =
      TokenShards::Open(dir_ + "/good.shard", Objective::kSft, kNoLimit);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->size(), 2);
  EXPECT_EQ((*opened)->total_tokens(), 6);
}

TEST_F(CorruptShardTest, Truncated) {
  EXPECT_THAT(Error(good_.substr(0, good_.size() - 1)), HasSubstr("truncated"));
  EXPECT_THAT(Error(good_.substr(0, 20)), HasSubstr("shorter than the 64-byte"));
  EXPECT_THAT(Error(""), HasSubstr("shorter than the 64-byte"));
}

TEST_F(CorruptShardTest, WrongVersionMagicObjectiveOrDtype) {
  EXPECT_THAT(Error(With<uint32_t>(8, 2)),
              HasSubstr("format version 2; this build reads version 1"));
  EXPECT_THAT(Error(With<char>(0, 'X')), HasSubstr("bad magic"));
  EXPECT_THAT(Error(good_, Objective::kDpo), HasSubstr("holds sft examples but the job's "
                                                       "objective is dpo"));
  EXPECT_THAT(Error(With<uint32_t>(16, 3)), HasSubstr("token ids of 3 bytes"));
  EXPECT_THAT(Error(With<uint32_t>(20, 4)), HasSubstr("unknown header flags"));
}

TEST_F(CorruptShardTest, CountsAndOffsetsBeyondTheFile) {
  EXPECT_THAT(Error(With<uint64_t>(40, uint64_t{1} << 60)), HasSubstr("more than a file of"));
  EXPECT_THAT(Error(With<uint64_t>(24, 3)), HasSubstr("describes"));
  // Layout: 64 header + 6 tokens x 2 (padded to 16) = 80: example_spans
  // [0, 2, 3] at 80, span_tokens [0, 2, 4, 6] at 104.
  EXPECT_THAT(Error(With<uint64_t>(80 + 8, 9)), HasSubstr("example 0 has spans 0 to 9"));
  EXPECT_THAT(Error(With<uint64_t>(104 + 8, 5)), HasSubstr("span 1 is empty or runs backwards"));
  EXPECT_THAT(Error(With<uint64_t>(104 + 24, 7)), HasSubstr("to token 7, not 0 to 6"));
}

TEST_F(CorruptShardTest, BadKindsIdsAndLengths) {
  // span_kinds at 104 + 32 + 24 = 160.
  EXPECT_THAT(Error(With<uint8_t>(160, 5)), HasSubstr("example 0: span 0 has kind 5"));
  EXPECT_THAT(Error(With<uint16_t>(64 + 2, 300)),
              HasSubstr("token 1 = 300 is outside the vocabulary [0, 256)"));
  EXPECT_THAT(Error(good_, Objective::kSft, {kVocab, 3, Truncation::kReject}),
              HasSubstr("example 0: has 4 tokens, longer than seq_len 3"));
}

}  // namespace
}  // namespace sbp
