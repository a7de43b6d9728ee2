// PackSequences (worker/train/packing.h): greedy, order-preserving, one
// document per example with its first label masked, deterministic; and the
// `data: {path, packing}` form of the job spec.
#include "worker/train/packing.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/worker/train/test_util.h"
#include "worker/train/dataset.h"
#include "worker/train/job_spec.h"

namespace sbp {
namespace {

TokenSequence Example(int n, int32_t first) {
  TokenSequence s;
  for (int i = 0; i < n; ++i) {
    s.input_ids.push_back(first + i);
    s.labels.push_back(i < n / 2 ? kIgnoreIndex : first + i);  // a masked prompt half
  }
  return s;
}

TEST(PackingTest, GreedyInOrderWithDocumentOffsetsAndMaskedFirstLabels) {
  const std::vector<TokenSequence> examples = {Example(5, 10), Example(4, 20), Example(7, 30),
                                               Example(10, 40), Example(1, 50)};
  const std::vector<TokenSequence> packed = PackSequences(examples, 10);
  // 5 + 4 fit in 10; 7 does not join them; 10 does not join 7; 1 does not join 10.
  ASSERT_EQ(packed.size(), 4u);
  EXPECT_EQ(packed[0].doc_offsets, (std::vector<int32_t>{0, 5, 9}));
  EXPECT_EQ(packed[1].doc_offsets, (std::vector<int32_t>{0, 7}));
  EXPECT_EQ(packed[2].doc_offsets, (std::vector<int32_t>{0, 10}));
  EXPECT_EQ(packed[3].doc_offsets, (std::vector<int32_t>{0, 1}));
  std::vector<int32_t> ids;
  for (const TokenSequence& s : packed) {
    ASSERT_EQ(s.input_ids.size(), s.labels.size());
    ids.insert(ids.end(), s.input_ids.begin(), s.input_ids.end());
  }
  std::vector<int32_t> want;
  for (const TokenSequence& e : examples)
    want.insert(want.end(), e.input_ids.begin(), e.input_ids.end());
  EXPECT_EQ(ids, want);
  // Labels: each document's first label is masked, the rest are the example's.
  EXPECT_EQ(packed[0].labels[5], kIgnoreIndex);
  EXPECT_EQ(packed[0].labels[7], 22);
  EXPECT_EQ(CountValidTargets(packed), CountValidTargets(examples));
  EXPECT_EQ(DocumentLengths(packed[0]), (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(DocumentLengths(examples[2]), (std::vector<int64_t>{7}));
}

TEST(PackingTest, DeterministicAndKeepsValidTargets) {
  std::vector<TokenSequence> examples;
  for (int i = 0; i < 40; ++i) examples.push_back(Example(1 + (i * 7) % 23, i * 100));
  const auto a = PackSequences(examples, 64);
  const auto b = PackSequences(examples, 64);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].input_ids, b[i].input_ids);
    EXPECT_EQ(a[i].labels, b[i].labels);
    EXPECT_EQ(a[i].doc_offsets, b[i].doc_offsets);
    EXPECT_LE(a[i].input_ids.size(), 64u);
  }
  EXPECT_EQ(CountValidTargets(a), CountValidTargets(examples));
}

constexpr char kSpec[] = R"(name: packed
model: m
objective: sft
seq_len: 4096
)";

TEST(PackingSpecTest, DataTakesAPathOrAMappingWithPacking) {
  auto plain = ParseJobSpec(std::string(kSpec) + "data: d.jsonl\n", "job.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->data, "d.jsonl");
  EXPECT_FALSE(plain->data_packing);
  auto packed =
      ParseJobSpec(std::string(kSpec) + "data: {path: d.shard, packing: true}\n", "job.yaml");
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed->data, "d.shard");
  EXPECT_TRUE(packed->data_packing);
  // Round trips through YAML and JSON.
  auto again = ParseJobSpec(JobSpecToYaml(*packed), "again.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *packed);
  auto from_json = JobSpecFromJson(JobSpecToJson(*packed));
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  EXPECT_EQ(*from_json, *packed);
  EXPECT_EQ(JobSpecToYaml(*plain).find("packing"), std::string::npos);
}

TEST(PackingSpecTest, ErrorsNameTheField) {
  auto no_path = ParseJobSpec(std::string(kSpec) + "data: {packing: true}\n", "job.yaml");
  ASSERT_FALSE(no_path.ok());
  EXPECT_NE(no_path.status().message().find("data: missing required field 'path'"),
            std::string::npos)
      << no_path.status();
  auto bad_bool = ParseJobSpec(std::string(kSpec) + "data: {path: d, packing: 3}\n", "job.yaml");
  ASSERT_FALSE(bad_bool.ok());
  EXPECT_NE(bad_bool.status().message().find("data.packing: must be true or false"),
            std::string::npos)
      << bad_bool.status();
  auto typo = ParseJobSpec(std::string(kSpec) + "data: {path: d, packign: true}\n", "job.yaml");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("did you mean 'packing'"), std::string::npos)
      << typo.status();
  std::string dpo = kSpec;
  dpo.replace(dpo.find("sft"), 3, "dpo");
  auto not_sft =
      ParseJobSpec(dpo + "data: {path: d, packing: true}\ndpo: {reference: m}\n", "job.yaml");
  ASSERT_FALSE(not_sft.ok());
  EXPECT_NE(not_sft.status().message().find("data.packing: packs SFT examples"), std::string::npos)
      << not_sft.status();
}

// examples/jobs/tiny-chat-packed.yaml: packs the chat shard's examples,
// several per sequence, keeping their valid targets.
TEST(PackingSpecTest, TheExampleJobPacksTheChatShard) {
  const std::string root = train_testing::SourceDir();
  const std::string path = root + "/examples/jobs/tiny-chat-packed.yaml";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto spec = ParseJobSpec(text.str(), path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->data_packing);
  auto data = Dataset::LoadForJob(*spec, root, /*vocab_size=*/512);
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<TokenSequence> step;
  for (int64_t i = 0; i < spec->train.sequences_per_step; ++i) step.push_back(data->SftAt(i));
  const std::vector<TokenSequence> packed = PackSequences(step, spec->seq_len);
  EXPECT_LT(packed.size() * 4, step.size()) << "at least four conversations per sequence";
  EXPECT_EQ(CountValidTargets(packed), CountValidTargets(step));
}

}  // namespace
}  // namespace sbp
