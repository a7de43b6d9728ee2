// The built-in rewards of online GRPO, the math answer normalisation, the
// length penalty and MakeRewardFunction's validation.
#include "worker/train/rollout/reward.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "worker/train/rollout/math_answer.h"

namespace sbp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

RewardInput TextInput(std::string text, nlohmann::json fields) {
  RewardInput input;
  input.completion_text = std::move(text);
  input.fields = std::move(fields);
  return input;
}

RewardInput IdsInput(std::vector<int32_t> ids, nlohmann::json fields = nlohmann::json::object()) {
  RewardInput input;
  input.completion_ids = std::move(ids);
  input.fields = std::move(fields);
  return input;
}

RewardSpec Function(std::string name) {
  RewardSpec spec;
  spec.function = std::move(name);
  return spec;
}

absl::StatusOr<std::vector<double>> ScoreWith(const RewardSpec& spec,
                                              const std::vector<RewardInput>& inputs,
                                              int64_t max_new_tokens = 0) {
  RewardContext context;
  context.max_new_tokens = max_new_tokens;
  auto reward = MakeRewardFunction(spec, context);
  if (!reward.ok()) return reward.status();
  return (*reward)->Score(inputs);
}

// The math_answer reward of one completion against one reference.
double Math(const std::string& completion, nlohmann::json reference) {
  auto rewards =
      ScoreWith(Function("math_answer"), {TextInput(completion, {{"answer", reference}})});
  EXPECT_TRUE(rewards.ok()) << rewards.status();
  return rewards.ok() ? rewards->at(0) : -1;
}

absl::Status MakeError(const RewardSpec& spec, int64_t max_new_tokens = 0) {
  RewardContext context;
  context.max_new_tokens = max_new_tokens;
  return MakeRewardFunction(spec, context).status();
}

// --- answer extraction and normalisation ---

TEST(MathAnswerTest, ExtractsTheLastBoxedWithNestedBraces) {
  EXPECT_EQ(ExtractMathAnswer("so \\boxed{1} no wait \\boxed{\\frac{1}{2}} done"), "\\frac{1}{2}");
  EXPECT_EQ(ExtractMathAnswer("$\\boxed{\\{1, 2\\}}$"), "\\{1, 2\\}");
  EXPECT_EQ(ExtractMathAnswer("\\fbox{7}"), "7");
  EXPECT_EQ(ExtractMathAnswer("\\boxed 5$"), "5");
  EXPECT_EQ(ExtractMathAnswer("\\boxed {42}"), "42");
}

TEST(MathAnswerTest, UnbalancedBoxedFallsBackToAnEarlierBoxedOrTheLastNumber) {
  EXPECT_EQ(ExtractMathAnswer("\\boxed{3} then \\boxed{4"), "3");
  EXPECT_EQ(ExtractMathAnswer("so 17 and \\boxed{4"), "4");
}

TEST(MathAnswerTest, ExtractsTheLastNumberWithoutBoxed) {
  EXPECT_EQ(ExtractMathAnswer("3 apples and 4 pears: 7."), "7");
  EXPECT_EQ(ExtractMathAnswer("the answer is -12"), "-12");
  EXPECT_EQ(ExtractMathAnswer("costs 1,000,000 dollars"), "1,000,000");
  EXPECT_EQ(ExtractMathAnswer("about 2.50 each"), "2.50");
  EXPECT_EQ(ExtractMathAnswer("it is 3/4 of it"), "3/4");
  EXPECT_EQ(ExtractMathAnswer("half: \\frac{1}{2}"), "\\frac{1}{2}");
  EXPECT_EQ(ExtractMathAnswer("x = .5"), ".5");
  EXPECT_EQ(ExtractMathAnswer("5-3=2"), "2");
  EXPECT_EQ(ExtractMathAnswer("x-3"), "3");  // a minus after a name is not a sign
  EXPECT_EQ(ExtractMathAnswer("no numbers here"), std::nullopt);
  EXPECT_EQ(ExtractMathAnswer(""), std::nullopt);
}

TEST(MathAnswerTest, Normalises) {
  EXPECT_EQ(NormalizeMathAnswer(" 1,000 "), "1000");
  EXPECT_EQ(NormalizeMathAnswer("1,234,567.5"), "1234567.5");
  EXPECT_EQ(NormalizeMathAnswer("1{,}000"), "1000");
  EXPECT_EQ(NormalizeMathAnswer("12,34"), "12,34");  // not a thousands group
  EXPECT_EQ(NormalizeMathAnswer("(1,2)"), "(1,2)");
  EXPECT_EQ(NormalizeMathAnswer("$42$."), "42");
  EXPECT_EQ(NormalizeMathAnswer("\\$5"), "5");
  EXPECT_EQ(NormalizeMathAnswer("\\frac{1}{2}"), "1/2");
  EXPECT_EQ(NormalizeMathAnswer("\\dfrac12"), "1/2");
  EXPECT_EQ(NormalizeMathAnswer("-\\tfrac{3}{4}"), "-3/4");
  EXPECT_EQ(NormalizeMathAnswer("\\frac{x+1}{2}"), "(x+1)/2");
  EXPECT_EQ(NormalizeMathAnswer("\\frac{\\sqrt{3}}{2}"), "\\sqrt{3}/2");
  EXPECT_EQ(NormalizeMathAnswer("\\frac{\\frac{1}{2}}{3}"), "(1/2)/3");
  EXPECT_EQ(NormalizeMathAnswer("\\sqrt2"), "\\sqrt{2}");
  EXPECT_EQ(NormalizeMathAnswer("\\text{(B)}"), "(B)");
  EXPECT_EQ(NormalizeMathAnswer("5\\text{ cm}"), "5");
  EXPECT_EQ(NormalizeMathAnswer("10 \\mbox{ dollars}"), "10");
  EXPECT_EQ(NormalizeMathAnswer("\\textbf{yes}"), "yes");
  EXPECT_EQ(NormalizeMathAnswer("2\\mathbf{v}"), "2v");  // bold is not a unit
  EXPECT_EQ(NormalizeMathAnswer("90^\\circ"), "90");
  EXPECT_EQ(NormalizeMathAnswer("90^{\\circ}"), "90");
  EXPECT_EQ(NormalizeMathAnswer("50\\%"), "50");
  EXPECT_EQ(NormalizeMathAnswer("\\left( 1, 2 \\right)"), "(1,2)");
  EXPECT_EQ(NormalizeMathAnswer("x \\rightarrow y"), "x\\rightarrowy");  // not \right
  EXPECT_EQ(NormalizeMathAnswer("1\\!000"), "1000");
  EXPECT_EQ(NormalizeMathAnswer("x = 5"), "5");
  EXPECT_EQ(NormalizeMathAnswer("a=1, b=2"), "a=1,b=2");
  EXPECT_EQ(NormalizeMathAnswer("{7}"), "7");
  EXPECT_EQ(NormalizeMathAnswer("\\boxed{\\frac{1}{2}}"), "1/2");
  EXPECT_EQ(NormalizeMathAnswer("..."), "");
}

TEST(MathAnswerTest, VeryLongAnswersAreComparedAsText) {
  const std::string long_answer = "\\text{" + std::string(5000, 'a') + "}";
  EXPECT_EQ(NormalizeMathAnswer(long_answer), long_answer);
  EXPECT_TRUE(MathAnswersEqual(long_answer, long_answer));
}

TEST(MathAnswerTest, Values) {
  EXPECT_EQ(MathAnswerValue("2.50"), 2.5);
  EXPECT_EQ(MathAnswerValue("-3"), -3);
  EXPECT_EQ(MathAnswerValue("+3"), 3);
  EXPECT_EQ(MathAnswerValue(".5"), 0.5);
  EXPECT_EQ(MathAnswerValue("1e3"), 1000);
  EXPECT_EQ(MathAnswerValue("1/4"), 0.25);
  EXPECT_EQ(MathAnswerValue("-1/4"), -0.25);
  EXPECT_EQ(MathAnswerValue("1/0"), std::nullopt);
  EXPECT_EQ(MathAnswerValue("1e999"), std::nullopt);
  EXPECT_EQ(MathAnswerValue("inf"), std::nullopt);
  EXPECT_EQ(MathAnswerValue("nan"), std::nullopt);
  EXPECT_EQ(MathAnswerValue("0x10"), std::nullopt);
  EXPECT_EQ(MathAnswerValue("1.2.3"), std::nullopt);
  EXPECT_EQ(MathAnswerValue("\\sqrt{2}"), std::nullopt);
  EXPECT_EQ(MathAnswerValue(""), std::nullopt);
  EXPECT_EQ(MathAnswerValue("-"), std::nullopt);
}

TEST(MathAnswerTest, EqualAnswers) {
  EXPECT_TRUE(MathAnswersEqual("\\frac{1}{2}", "1/2"));
  EXPECT_TRUE(MathAnswersEqual("\\frac{1}{2}", "0.5"));
  EXPECT_TRUE(MathAnswersEqual("1/2", ".50"));
  EXPECT_TRUE(MathAnswersEqual("2.50", "2.5"));
  EXPECT_TRUE(MathAnswersEqual("-\\frac{1}{2}", "-0.5"));
  EXPECT_TRUE(MathAnswersEqual("\\frac{-1}{2}", "-0.5"));
  EXPECT_TRUE(MathAnswersEqual("1,000", "1000"));
  EXPECT_TRUE(MathAnswersEqual("$1,000.00$", "1000"));
  EXPECT_TRUE(MathAnswersEqual("\\sqrt{3}/2", "\\frac{\\sqrt{3}}{2}"));
  EXPECT_TRUE(MathAnswersEqual("\\text{(C)}", "(C)"));
  EXPECT_TRUE(MathAnswersEqual("x=3", "3"));
  EXPECT_TRUE(MathAnswersEqual("1e3", "1000"));
  EXPECT_FALSE(MathAnswersEqual("0.33", "1/3"));
  EXPECT_FALSE(MathAnswersEqual("-2", "2"));
  EXPECT_FALSE(MathAnswersEqual("12", "1,2"));
  EXPECT_FALSE(MathAnswersEqual("", ""));
  EXPECT_FALSE(MathAnswersEqual("$", "$"));  // both normalise to nothing
}

// --- math_answer ---

TEST(MathAnswerRewardTest, ScoresBoxedAndLastNumberAnswers) {
  EXPECT_EQ(Math("so the answer is \\boxed{\\frac{1}{2}}.", "1/2"), 1);
  EXPECT_EQ(Math("so the answer is \\boxed{\\frac{1}{2}}.", 0.5), 1);
  EXPECT_EQ(Math("so the answer is \\boxed{\\dfrac{1}{2}}.", "\\frac{1}{2}"), 1);
  EXPECT_EQ(Math("2 + 2 = 4, so 4.", 4), 1);
  EXPECT_EQ(Math("2 + 2 = 4, so 4.", "4"), 1);
  EXPECT_EQ(Math("It costs $1,000.", 1000), 1);
  EXPECT_EQ(Math("The temperature drops to -7 degrees", -7), 1);
  EXPECT_EQ(Math("The temperature drops to -7 degrees", 7), 0);
  EXPECT_EQ(Math("\\boxed{5} but the last number is 6", 5), 1);
  EXPECT_EQ(Math("The answer is \\boxed{2.50}", "2.5"), 1);
  EXPECT_EQ(Math("The answer is \\boxed{3}", "\\boxed{3}"), 1);
  EXPECT_EQ(Math("The answer is \\boxed{5 \\text{ cm}}", "5"), 1);
  EXPECT_EQ(Math("The answer is 3", 4), 0);
  EXPECT_EQ(Math("I do not know", "4"), 0);
  EXPECT_EQ(Math("", "4"), 0);
  EXPECT_EQ(Math("The answer is 1000000", 1e6), 1);
  EXPECT_EQ(Math("The answer is 0.1", 0.1), 1);
}

TEST(MathAnswerRewardTest, LongTextIsFast) {
  // Unbalanced \boxed{ and \frac{ everywhere: scanning must stay linear.
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "\\boxed{ 12, \\frac{1 {";
  EXPECT_EQ(Math(text + " so 7", 7), 1);
  EXPECT_EQ(Math(text + "\\boxed{7}", 7), 1);
}

TEST(MathAnswerRewardTest, ReferenceErrorsNameTheCompletionAndTheField) {
  const std::vector<RewardInput> inputs = {TextInput("1", {{"answer", "1"}}),
                                           TextInput("2", {{"solution", "2"}})};
  auto missing = ScoreWith(Function("math_answer"), inputs);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.status().message(),
            "completion 1: the prompt has no \"answer\" field (grpo.reward.reference_field)");

  RewardSpec spec = Function("math_answer");
  spec.reference_field = "solution";
  auto other_field = ScoreWith(spec, {TextInput("2", {{"solution", "2"}})});
  ASSERT_TRUE(other_field.ok()) << other_field.status();
  EXPECT_THAT(*other_field, ElementsAre(1));

  auto wrong_type = ScoreWith(Function("math_answer"), {TextInput("1", {{"answer", {1, 2}}})});
  EXPECT_EQ(wrong_type.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong_type.status().message(),
            "completion 0: the prompt's \"answer\" field must be a string or a number for "
            "math_answer, not array (grpo.reward.reference_field)");
  auto boolean = ScoreWith(Function("math_answer"), {TextInput("1", {{"answer", true}})});
  EXPECT_THAT(boolean.status().message(), HasSubstr("not boolean"));
  auto not_object = ScoreWith(Function("math_answer"), {TextInput("1", nullptr)});
  EXPECT_THAT(not_object.status().message(), HasSubstr("completion 0: the prompt has no"));
}

// --- exact_match ---

TEST(ExactMatchRewardTest, StringReferenceComparesTrimmedText) {
  auto rewards = ScoreWith(
      Function("exact_match"),
      {TextInput("  Paris\n", {{"answer", "Paris"}}), TextInput("paris", {{"answer", "Paris"}}),
       TextInput("Paris", {{"answer", " Paris "}}), TextInput("Paris.", {{"answer", "Paris"}})});
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(1, 0, 1, 0));
}

TEST(ExactMatchRewardTest, IdReferenceComparesIds) {
  auto rewards =
      ScoreWith(Function("exact_match"), {IdsInput({1, 2, 3}, {{"answer", {1, 2, 3}}}),
                                          IdsInput({1, 2}, {{"answer", {1, 2, 3}}}),
                                          IdsInput({1, 2, 4}, {{"answer", {1, 2, 3}}}),
                                          IdsInput({}, {{"answer", nlohmann::json::array()}})});
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(1, 0, 0, 1));
}

TEST(ExactMatchRewardTest, NumberReferenceComparesAsMathAnswer) {
  auto rewards =
      ScoreWith(Function("exact_match"), {TextInput("the total is 1,000", {{"answer", 1000}}),
                                          TextInput("\\boxed{\\frac{1}{4}}", {{"answer", 0.25}}),
                                          TextInput("999", {{"answer", 1000}})});
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(1, 1, 0));
}

TEST(ExactMatchRewardTest, WrongReferenceTypes) {
  auto object = ScoreWith(Function("exact_match"), {TextInput("x", {{"answer", {{"a", 1}}}})});
  EXPECT_EQ(object.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(object.status().message(),
            "completion 0: the prompt's \"answer\" field must be a string, a number or an array "
            "of token ids for exact_match, not object (grpo.reward.reference_field)");
  auto bad_id = ScoreWith(Function("exact_match"),
                          {IdsInput({1}, {{"answer", 1}}), IdsInput({1}, {{"answer", {1, "2"}}})});
  EXPECT_EQ(bad_id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_id.status().message(), HasSubstr("completion 1: "));
  EXPECT_THAT(bad_id.status().message(), HasSubstr("its element 1 is string"));
  auto fraction = ScoreWith(Function("exact_match"), {IdsInput({1}, {{"answer", {1.5}}})});
  EXPECT_THAT(fraction.status().message(), HasSubstr("its element 0 is the number 1.5"));
}

// --- token_match ---

TEST(TokenMatchRewardTest, PartialCredit) {
  auto rewards =
      ScoreWith(Function("token_match"),
                {IdsInput({1, 2, 3, 4}, {{"answer", {1, 2, 3, 4}}}),
                 IdsInput({1, 9, 3, 9}, {{"answer", {1, 2, 3, 4}}}),
                 IdsInput({1, 2}, {{"answer", {1, 2, 3, 4}}}),
                 IdsInput({1, 2, 3, 4, 5, 6, 7, 8}, {{"answer", {1, 2, 3, 4}}}),
                 IdsInput({5, 6}, {{"answer", {1, 2}}}), IdsInput({}, {{"answer", {1, 2}}}),
                 IdsInput({}, {{"answer", nlohmann::json::array()}})});
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(1, 0.5, 0.5, 0.5, 0, 0, 1));
}

TEST(TokenMatchRewardTest, NeedsAnIdArray) {
  auto text = ScoreWith(Function("token_match"), {IdsInput({1}, {{"answer", "1"}})});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message(),
            "completion 0: the prompt's \"answer\" field must be an array of token ids for "
            "token_match, not string (grpo.reward.reference_field)");
  auto missing = ScoreWith(Function("token_match"), {IdsInput({1})});
  EXPECT_THAT(missing.status().message(), HasSubstr("has no \"answer\" field"));
  // An id no int32 token can have still compares (unequal), it does not wrap.
  auto huge = ScoreWith(Function("token_match"),
                        {IdsInput({-1}, {{"answer", {std::numeric_limits<uint64_t>::max()}}})});
  ASSERT_TRUE(huge.ok()) << huge.status();
  EXPECT_THAT(*huge, ElementsAre(0));
}

// --- regex ---

TEST(RegexRewardTest, MatchesAnywhere) {
  RewardSpec spec = Function("regex");
  spec.pattern = "answer: *\\d+";
  auto rewards = ScoreWith(spec, {TextInput("so the answer: 42, ok", {}),
                                  TextInput("answer: none", {}), TextInput("", {})});
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(1, 0, 0));

  spec.pattern = "(?i)^<think>.*</think>";
  rewards =
      ScoreWith(spec, {TextInput("<THINK>hm</THINK> 4", {}), TextInput("x<think></think>", {})});
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(1, 0));
}

TEST(RegexRewardTest, LongCompletionsAndPathologicalPatternsAreSafe) {
  RewardSpec spec = Function("regex");
  spec.pattern = "(a*)*b";
  const std::string text(1 << 20, 'a');  // std::regex would overflow the stack here
  auto rewards = ScoreWith(spec, {TextInput(text, {}), TextInput(text + "b", {})});
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(0, 1));
}

// --- length penalty ---

TEST(LengthPenaltyTest, DapoSoftOverlongPunishment) {
  // M = 10, B = 4, w = 0.5: no penalty up to 6 tokens, then -0.125 per token.
  RewardSpec spec = Function("token_match");
  spec.length_penalty_buffer = 4;
  spec.length_penalty_weight = 0.5;
  std::vector<RewardInput> inputs;
  for (int length : {0, 5, 6, 7, 8, 10}) {
    inputs.push_back(
        IdsInput(std::vector<int32_t>(length, 1), {{"answer", nlohmann::json::array()}}));
  }
  RewardInput truncated = IdsInput({}, {{"answer", nlohmann::json::array()}});
  truncated.truncated = true;  // counts as M
  inputs.push_back(truncated);
  auto rewards = ScoreWith(spec, inputs, /*max_new_tokens=*/10);
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(1, 0, 0, -0.125, -0.25, -0.5, 1 - 0.5));
}

TEST(LengthPenaltyTest, BufferEqualToMaxAndDefaultWeight) {
  RewardSpec spec = Function("regex");
  spec.pattern = "x";
  spec.length_penalty_buffer = 4;
  RewardInput input = TextInput("x", {});
  input.completion_ids = {1, 2};
  auto rewards = ScoreWith(spec, {input}, /*max_new_tokens=*/4);
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(0.5));  // 1 - 1.0 * 2 / 4
}

TEST(LengthPenaltyTest, OffByDefault) {
  RewardSpec spec = Function("regex");
  spec.pattern = "x";
  RewardInput input = TextInput("x", {});
  input.truncated = true;
  auto rewards = ScoreWith(spec, {input}, /*max_new_tokens=*/4);
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(1));
}

TEST(LengthPenaltyTest, AppliesToProgramsToo) {
  RewardSpec spec;
  spec.command = {"/bin/sh", "-c", "while read -r line; do echo 2; done"};
  spec.length_penalty_buffer = 2;
  RewardInput input = IdsInput({1, 2, 3, 4});
  auto rewards = ScoreWith(spec, {input}, /*max_new_tokens=*/4);
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_THAT(*rewards, ElementsAre(1));  // 2 - 1.0 * 2 / 2
}

TEST(RewardTest, EmptyInputGivesNoRewards) {
  auto rewards = ScoreWith(Function("math_answer"), {});
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_TRUE(rewards->empty());
}

// --- validation ---

TEST(MakeRewardFunctionTest, FunctionOrCommand) {
  RewardSpec neither;
  EXPECT_EQ(MakeError(neither).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MakeError(neither).message(), HasSubstr("grpo.reward.function"));
  EXPECT_THAT(MakeError(neither).message(), HasSubstr("grpo.reward.command"));

  RewardSpec both = Function("math_answer");
  both.command = {"score.py"};
  EXPECT_EQ(MakeError(both).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MakeError(both).message(), HasSubstr("both grpo.reward.function"));

  RewardSpec empty_program;
  empty_program.command = {""};
  EXPECT_EQ(MakeError(empty_program).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MakeError(empty_program).message(), HasSubstr("grpo.reward.command"));
}

TEST(MakeRewardFunctionTest, UnknownFunctionListsTheKnownOnes) {
  const absl::Status status = MakeError(Function("bleu"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "grpo.reward.function \"bleu\" is not one of math_answer, exact_match, token_match, "
            "regex");
}

TEST(MakeRewardFunctionTest, Regex) {
  RewardSpec spec = Function("regex");
  EXPECT_THAT(MakeError(spec).message(), HasSubstr("grpo.reward.pattern is required"));
  spec.pattern = "(unclosed";
  const absl::Status status = MakeError(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("grpo.reward.pattern \"(unclosed\" does not compile"));

  RewardSpec stray = Function("math_answer");
  stray.pattern = "x";
  EXPECT_THAT(MakeError(stray).message(), HasSubstr("grpo.reward.pattern is only used with"));
}

TEST(MakeRewardFunctionTest, ReferenceFieldMustNotBeEmpty) {
  RewardSpec spec = Function("exact_match");
  spec.reference_field = "";
  EXPECT_THAT(MakeError(spec).message(), HasSubstr("grpo.reward.reference_field"));
}

TEST(MakeRewardFunctionTest, Timeout) {
  for (double timeout : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                         std::numeric_limits<double>::quiet_NaN()}) {
    RewardSpec spec = Function("math_answer");
    spec.timeout_s = timeout;
    const absl::Status status = MakeError(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << timeout;
    EXPECT_THAT(status.message(), HasSubstr("grpo.reward.timeout_s")) << timeout;
  }
  RewardSpec program;
  program.command = {"true"};
  program.timeout_s = 0;
  EXPECT_THAT(MakeError(program).message(), HasSubstr("grpo.reward.timeout_s"));
}

TEST(MakeRewardFunctionTest, LengthPenaltyBounds) {
  RewardSpec spec = Function("math_answer");
  spec.length_penalty_buffer = -1;
  EXPECT_THAT(MakeError(spec, 10).message(),
              HasSubstr("grpo.reward.length_penalty_buffer must be >= 0"));
  spec.length_penalty_buffer = 11;
  EXPECT_THAT(MakeError(spec, 10).message(),
              HasSubstr("grpo.reward.length_penalty_buffer (11) must not exceed "
                        "grpo.rollout.max_new_tokens (10)"));
  spec.length_penalty_buffer = 10;
  EXPECT_TRUE(MakeError(spec, 10).ok());
  spec.length_penalty_buffer = 5;
  EXPECT_THAT(MakeError(spec, 0).message(), HasSubstr("needs grpo.rollout.max_new_tokens > 0"));
  spec.length_penalty_weight = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(MakeError(spec, 10).message(), HasSubstr("grpo.reward.length_penalty_weight"));
  spec.length_penalty_weight = -1;
  EXPECT_THAT(MakeError(spec, 10).message(), HasSubstr("grpo.reward.length_penalty_weight"));
  spec.length_penalty_buffer = 0;  // off: the weight is not looked at
  EXPECT_TRUE(MakeError(spec, 10).ok());
}

TEST(MakeRewardFunctionTest, EveryBuiltinBuilds) {
  for (const char* name : {"math_answer", "exact_match", "token_match"}) {
    EXPECT_TRUE(MakeError(Function(name)).ok()) << name;
  }
}

}  // namespace
}  // namespace sbp
