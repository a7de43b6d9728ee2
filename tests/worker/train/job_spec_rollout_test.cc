// grpo.rollout and grpo.reward in job specs: parsed with defaults, written
// back unchanged, every mistake named by its field; offline specs keep
// their canonical form (and so their run hash).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "worker/train/job_spec.h"

namespace sbp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Online(const std::string& grpo) {
  return absl::StrCat(
      "name: online\nmodel: m\ndata: prompts.jsonl\nobjective: grpo\nseq_len: 64\n"
      "train: {steps: 4, sequences_per_step: 2}\n",
      "grpo: ", grpo, "\n");
}

TEST(JobSpecRolloutTest, ParsesWithDefaultsAndRoundTrips) {
  auto spec = ParseJobSpec(
      Online("{beta: 0, rollout: {group_size: 4, max_new_tokens: 16, temperature: 0.7, "
             "top_p: 0.9, top_k: 20, eos_token_id: [3, 7], stop: [[5, 6], [9]], tokenizer: tok}, "
             "reward: {function: math_answer, reference_field: solution, timeout_s: 5, "
             "length_penalty_buffer: 4, length_penalty_weight: 0.5}}"),
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const RolloutSpec& r = spec->grpo.rollout;
  EXPECT_TRUE(spec->grpo.online());
  EXPECT_EQ(r.group_size, 4);
  EXPECT_EQ(r.max_new_tokens, 16);
  EXPECT_DOUBLE_EQ(r.temperature, 0.7);
  EXPECT_DOUBLE_EQ(r.top_p, 0.9);
  EXPECT_EQ(r.top_k, 20);
  EXPECT_FALSE(r.eos_from_config);
  EXPECT_EQ(r.eos_token_ids, (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(r.stop, (std::vector<std::vector<int64_t>>{{5, 6}, {9}}));
  EXPECT_EQ(r.tokenizer, "tok");
  EXPECT_EQ(spec->grpo.reward.function, "math_answer");
  EXPECT_EQ(spec->grpo.reward.reference_field, "solution");
  EXPECT_EQ(spec->grpo.reward.length_penalty_buffer, 4);
  auto again = ParseJobSpec(JobSpecToYaml(*spec), "canonical.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobSpecToYaml(*spec);
  EXPECT_EQ(*again, *spec);

  auto command = ParseJobSpec(
      Online("{rollout: {group_size: 2, max_new_tokens: 32}, reward: {command: [python3, "
             "reward.py, --strict]}}"),
      "job.yaml");
  ASSERT_TRUE(command.ok()) << command.status();
  EXPECT_EQ(command->grpo.reward.command,
            (std::vector<std::string>{"python3", "reward.py", "--strict"}));
  EXPECT_TRUE(command->grpo.rollout.eos_from_config);
  EXPECT_DOUBLE_EQ(command->grpo.reward.timeout_s, 60);
  auto round = ParseJobSpec(JobSpecToYaml(*command), "canonical.yaml");
  ASSERT_TRUE(round.ok()) << round.status();
  EXPECT_EQ(*round, *command);
}

TEST(JobSpecRolloutTest, OfflineSpecsWriteNoRolloutFields) {
  auto spec = ParseJobSpec(Online("{beta: 0}"), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->grpo.online());
  EXPECT_THAT(JobSpecToYaml(*spec), Not(HasSubstr("rollout")));
  EXPECT_THAT(JobSpecToYaml(*spec), Not(HasSubstr("reward")));
}

TEST(JobSpecRolloutTest, MistakesNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{rollout: {group_size: 1}, reward: {function: regex, pattern: x}}",
       "grpo.rollout.group_size"},
      {"{rollout: {max_new_tokens: 4}, reward: {function: exact_match}}",
       "missing required field 'group_size'"},
      {"{rollout: {group_size: 4, max_new_tokens: 64}, reward: {function: exact_match}}",
       "grpo.rollout.max_new_tokens: must be below seq_len (64)"},
      {"{rollout: {group_size: 4, max_new_tokens: 8}, reward: {function: exact_match}}",
       "max_new_tokens"},
      {"{rollout: {group_size: 4, max_new_tokens: 8, temperature: -1}, reward: {function: "
       "exact_match}}",
       "grpo.rollout.temperature"},
      {"{rollout: {group_size: 4, max_new_tokens: 8, top_p: 0}, reward: {function: exact_match}}",
       "grpo.rollout.top_p"},
      {"{rollout: {group_size: 4, max_new_tokens: 8, eos_token_id: -3}, reward: {function: "
       "exact_match}}",
       "grpo.rollout.eos_token_id"},
      {"{rollout: {group_size: 4, max_new_tokens: 8, stop: [[]]}, reward: {function: "
       "exact_match}}",
       "grpo.rollout.stop"},
      {"{rollout: {group_size: 4, max_new_tokens: 8, sampler: greedy}, reward: {function: "
       "exact_match}}",
       "unknown key 'sampler'"},
      {"{rollout: {group_size: 4, max_new_tokens: 8}}", "needs grpo.reward"},
      {"{reward: {function: exact_match}}", "it needs grpo.rollout"},
      {"{rollout: {group_size: 4, max_new_tokens: 8}, reward: {}}",
       "needs 'function' (math_answer, exact_match, token_match, regex) or 'command'"},
      {"{rollout: {group_size: 4, max_new_tokens: 8}, reward: {function: bleu}}",
       "grpo.reward.function: must be one of math_answer, exact_match, token_match, regex"},
      {"{rollout: {group_size: 4, max_new_tokens: 8}, reward: {function: exact_match, command: "
       "[x]}}",
       "not both"},
      {"{rollout: {group_size: 4, max_new_tokens: 8}, reward: {function: regex}}",
       "function regex needs 'pattern'"},
      {"{rollout: {group_size: 4, max_new_tokens: 8}, reward: {function: exact_match, pattern: "
       "x}}",
       "grpo.reward.pattern: is only read by function regex"},
      {"{rollout: {group_size: 4, max_new_tokens: 8}, reward: {function: math_answer}}",
       "grpo.rollout.tokenizer: is needed by reward function math_answer"},
      {"{rollout: {group_size: 4, max_new_tokens: 8}, reward: {command: reward.py}}",
       "grpo.reward.command: must be a list"},
      {"{rollout: {group_size: 4, max_new_tokens: 8}, reward: {command: [x], timeout_s: 0}}",
       "grpo.reward.timeout_s"},
      {"{rollout: {group_size: 4, max_new_tokens: 8}, reward: {function: exact_match, "
       "length_penalty_buffer: 9}}",
       "longer than grpo.rollout.max_new_tokens (8)"},
  };
  for (const auto& [grpo, expected] : cases) {
    std::string text = Online(grpo);
    if (expected == "max_new_tokens") {
      // A prompt budget is checked against seq_len: 8 + 8 > 12.
      text.replace(text.find("seq_len: 64"), 11, "seq_len: 8");
    }
    auto spec = ParseJobSpec(text, "job.yaml");
    ASSERT_FALSE(spec.ok()) << grpo;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << grpo;
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(expected)) << grpo;
  }
  auto sft = ParseJobSpec(
      "name: s\nmodel: m\ndata: d\nobjective: sft\nseq_len: 8\n"
      "grpo: {rollout: {group_size: 2}, reward: {function: exact_match}}\n",
      "job.yaml");
  ASSERT_FALSE(sft.ok());
  EXPECT_THAT(std::string(sft.status().message()), HasSubstr("objective is sft"));
  auto parallel = ParseJobSpec(
      Online("{rollout: {group_size: 2, max_new_tokens: 8}, reward: {function: exact_match}}") +
          "resources: {world_size: 2, sequence_parallel: 2}\n",
      "job.yaml");
  ASSERT_FALSE(parallel.ok());
  EXPECT_THAT(std::string(parallel.status().message()),
              HasSubstr("resources.sequence_parallel: is not supported with online GRPO"));
}

}  // namespace
}  // namespace sbp
