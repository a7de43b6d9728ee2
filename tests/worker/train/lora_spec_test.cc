// The job spec's `lora:` block: defaults, canonical module order, round trips
// through YAML and JSON, and errors that name the field and the bad value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "worker/train/job_spec.h"

namespace sbp {
namespace {

using ::testing::HasSubstr;

constexpr char kMinimal[] = "name: job\nmodel: m\ndata: d.jsonl\nobjective: sft\nseq_len: 64\n";

absl::StatusOr<JobSpec> WithLora(const std::string& lora) {
  return ParseJobSpec(absl::StrCat(kMinimal, "lora: ", lora, "\n"), "job.yaml");
}

TEST(LoraSpecTest, AbsentMeansFullFineTuning) {
  auto spec = ParseJobSpec(kMinimal, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->lora.enabled());
  EXPECT_EQ(JobSpecToYaml(*spec).find("lora"), std::string::npos);
}

TEST(LoraSpecTest, ReadsEveryField) {
  auto spec = WithLora(
      "{r: 16, alpha: 32, target_modules: [v_proj, q_proj, down_proj], rslora: true, "
      "init_seed: 9, dropout: 0}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const LoraOptions& l = spec->lora;
  EXPECT_EQ(l.r, 16);
  EXPECT_EQ(l.alpha, 32);
  EXPECT_EQ(l.target_modules, (std::vector<std::string>{"q_proj", "v_proj", "down_proj"}));
  EXPECT_TRUE(l.rslora);
  EXPECT_EQ(l.init_seed, 9u);
  EXPECT_DOUBLE_EQ(l.scaling(), 8.0);
}

TEST(LoraSpecTest, Defaults) {
  auto spec = WithLora("{r: 8}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->lora.alpha, 8);
  EXPECT_EQ(spec->lora.target_modules, LoraModuleNames());
  EXPECT_FALSE(spec->lora.rslora);
  EXPECT_DOUBLE_EQ(spec->lora.scaling(), 1.0);
}

TEST(LoraSpecTest, RoundTrips) {
  auto spec = WithLora("{r: 4, alpha: 6.5, target_modules: [o_proj, k_proj], init_seed: 3}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto yaml = ParseJobSpec(JobSpecToYaml(*spec), "again.yaml");
  ASSERT_TRUE(yaml.ok()) << yaml.status() << "\n" << JobSpecToYaml(*spec);
  EXPECT_EQ(*yaml, *spec);
  auto json = JobSpecFromJson(JobSpecToJson(*spec));
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*json, *spec);
}

struct ErrorCase {
  std::string lora;
  std::string message;
};

class LoraSpecErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(LoraSpecErrorTest, NamesTheField) {
  auto spec = WithLora(GetParam().lora);
  ASSERT_FALSE(spec.ok()) << GetParam().lora;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("job.yaml: "));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Errors, LoraSpecErrorTest,
    ::testing::Values(
        ErrorCase{"{alpha: 16}", "lora: missing required field 'r'"},
        ErrorCase{"{r: 0}", "lora.r: must be a positive integer (got 0)"},
        ErrorCase{"{r: 100000}", "lora.r: must be at most 65536"},
        ErrorCase{"{r: 8, alpha: -1}", "lora.alpha: must be a positive number"},
        ErrorCase{"{r: 8, dropout: 0.05}", "lora.dropout: only 0 is supported"},
        ErrorCase{"{r: 8, target_modules: [q_proj, qkv_proj, lm_head]}",
                  "lora.target_modules: unknown modules qkv_proj, lm_head (expected q_proj"},
        ErrorCase{"{r: 8, target_modules: [q_proj, q_proj]}", "'q_proj' is listed twice"},
        ErrorCase{"{r: 8, target_modules: []}", "lora.target_modules: must be a list"},
        ErrorCase{"{r: 8, target_modules: q_proj}", "lora.target_modules: must be a list"},
        ErrorCase{"{r: 8, rank: 4}", "lora: unknown key 'rank'"},
        ErrorCase{"{r: 8, rslora: maybe}", "lora.rslora: must be true or false"}));

}  // namespace
}  // namespace sbp
