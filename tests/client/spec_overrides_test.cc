// `--set KEY=VALUE` (client/spec_overrides.h): overrides reach the parser as
// if written in the file, and bad keys and values get the parser's errors.
#include "client/spec_overrides.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "worker/train/job_spec.h"

namespace sbp::cli {
namespace {

using ::testing::HasSubstr;

constexpr char kSpec[] =
    "name: tiny\nmodel: m\ndata: d.jsonl\nobjective: sft\nseq_len: 8\n"
    "train: {steps: 4, sequences_per_step: 2, lr: 0.01}\n";

absl::StatusOr<JobSpec> Parsed(const std::vector<std::string>& overrides) {
  absl::StatusOr<std::string> text = ApplySpecOverrides(kSpec, overrides);
  if (!text.ok()) return text.status();
  return ParseJobSpec(*text, SpecSourceName("job.yaml", overrides));
}

TEST(SpecOverridesTest, ValuesLandWhereTheKeysSay) {
  absl::StatusOr<JobSpec> spec =
      Parsed({"train.lr=2e-4", "resources.device=cuda", "checkpoint.every_steps=2", "train.steps=9",
              "train.lr=3e-4"});  // the last one wins
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_DOUBLE_EQ(spec->train.lr, 3e-4);
  EXPECT_EQ(spec->train.steps, 9);
  EXPECT_EQ(spec->train.sequences_per_step, 2);  // the rest of train: kept
  EXPECT_EQ(spec->resources.device, DeviceKind::kCuda);
  EXPECT_EQ(spec->checkpoint.every_steps, 2);
  EXPECT_EQ(spec->name, "tiny");
  // No overrides: the text as it was.
  EXPECT_EQ(*ApplySpecOverrides(kSpec, {}), kSpec);
}

TEST(SpecOverridesTest, BadKeysAndValuesGetTheParsersErrors) {
  EXPECT_THAT(Parsed({"train.lr=abc"}).status().message(),
              HasSubstr("job.yaml with --set: train.lr: must be a number"));
  EXPECT_THAT(Parsed({"train.lrr=1"}).status().message(), HasSubstr("unknown key 'lrr'"));
  EXPECT_THAT(Parsed({"train.steps=-1"}).status().message(), HasSubstr("train.steps"));
}

TEST(SpecOverridesTest, MalformedOverridesNameThemselves) {
  EXPECT_THAT(ApplySpecOverrides(kSpec, {"train.lr"}).status().message(),
              HasSubstr("--set train.lr: expected KEY=VALUE"));
  EXPECT_THAT(ApplySpecOverrides(kSpec, {"train..lr=1"}).status().message(),
              HasSubstr("the key must be dotted names"));
  EXPECT_THAT(ApplySpecOverrides(kSpec, {"data.path=x"}).status().message(),
              HasSubstr("--set data.path=x: data is not a mapping"));
  EXPECT_THAT(ApplySpecOverrides(kSpec, {"train.lr=[1"}).status().message(),
              HasSubstr("--set train.lr=[1: the value is not YAML"));
  EXPECT_FALSE(ApplySpecOverrides("- a list\n", {"a=1"}).ok());
  // Deep nesting in the file is refused, not a crash.
  EXPECT_FALSE(ApplySpecOverrides(std::string(100000, '[') + "\n", {"a=1"}).ok());
}

}  // namespace
}  // namespace sbp::cli
