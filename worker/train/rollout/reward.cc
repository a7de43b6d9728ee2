#include "worker/train/rollout/reward.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "re2/re2.h"
#include "worker/train/rollout/math_answer.h"
#include "worker/train/rollout/reward_program.h"

namespace sbp {
namespace {

constexpr const char* kFunctionNames = "math_answer, exact_match, token_match, regex";

// Built-in rewards score each completion on its own.
class PerInputReward : public RewardFunction {
 public:
  absl::StatusOr<std::vector<double>> Score(const std::vector<RewardInput>& inputs) override {
    std::vector<double> rewards;
    rewards.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      ASSIGN_OR_RETURN(const double reward, ScoreOne(inputs[i], i));
      rewards.push_back(reward);
    }
    return rewards;
  }

 protected:
  virtual absl::StatusOr<double> ScoreOne(const RewardInput& input, size_t index) const = 0;
};

// The built-ins that compare against the prompt line's reference field.
class ReferenceReward : public PerInputReward {
 public:
  ReferenceReward(std::string function, std::string field)
      : function_(std::move(function)), field_(std::move(field)) {}

 protected:
  absl::StatusOr<const nlohmann::json*> Reference(const RewardInput& input, size_t index) const {
    if (input.fields.is_object()) {
      const auto found = input.fields.find(field_);
      if (found != input.fields.end()) return &*found;
    }
    return absl::InvalidArgumentError(absl::StrCat("completion ", index, ": the prompt has no \"",
                                                   field_,
                                                   "\" field (grpo.reward.reference_field)"));
  }

  absl::Status WrongType(size_t index, const nlohmann::json& value,
                         absl::string_view expected) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "completion ", index, ": the prompt's \"", field_, "\" field must be ", expected, " for ",
        function_, ", not ", value.type_name(), " (grpo.reward.reference_field)"));
  }

  // An array of token ids; InvalidArgument for anything else.
  absl::StatusOr<std::vector<int64_t>> Ids(size_t index, const nlohmann::json& value,
                                           absl::string_view expected) const {
    if (!value.is_array()) return WrongType(index, value, expected);
    std::vector<int64_t> ids;
    ids.reserve(value.size());
    for (size_t k = 0; k < value.size(); ++k) {
      const nlohmann::json& id = value[k];
      if (!id.is_number_integer()) {
        return absl::InvalidArgumentError(
            absl::StrCat("completion ", index, ": the prompt's \"", field_, "\" field must be ",
                         expected, " for ", function_, "; its element ", k, " is ",
                         JsonTypeText(id), " (grpo.reward.reference_field)"));
      }
      // An id past int64 matches no token; saturate rather than wrap.
      ids.push_back(id.is_number_unsigned()
                        ? static_cast<int64_t>(std::min<uint64_t>(id.get<uint64_t>(), INT64_MAX))
                        : id.get<int64_t>());
    }
    return ids;
  }

  static std::string JsonTypeText(const nlohmann::json& value) {
    return value.is_number() ? absl::StrCat("the number ", value.dump()) : value.type_name();
  }

  // A number reference as answer text ("2", "0.5").
  static std::string NumberText(const nlohmann::json& value) { return value.dump(); }

  const std::string function_;
  const std::string field_;
};

class MathAnswerReward : public ReferenceReward {
 public:
  explicit MathAnswerReward(std::string field) : ReferenceReward("math_answer", std::move(field)) {}

 protected:
  absl::StatusOr<double> ScoreOne(const RewardInput& input, size_t index) const override {
    ASSIGN_OR_RETURN(const nlohmann::json* reference, Reference(input, index));
    std::string answer;
    if (reference->is_string()) {
      answer = reference->get<std::string>();
    } else if (reference->is_number()) {
      answer = NumberText(*reference);
    } else {
      return WrongType(index, *reference, "a string or a number");
    }
    return MathAnswerMatches(input.completion_text, answer) ? 1.0 : 0.0;
  }
};

class ExactMatchReward : public ReferenceReward {
 public:
  explicit ExactMatchReward(std::string field) : ReferenceReward("exact_match", std::move(field)) {}

 protected:
  absl::StatusOr<double> ScoreOne(const RewardInput& input, size_t index) const override {
    ASSIGN_OR_RETURN(const nlohmann::json* reference, Reference(input, index));
    if (reference->is_string()) {
      const std::string& text = reference->get_ref<const std::string&>();
      return absl::StripAsciiWhitespace(input.completion_text) == absl::StripAsciiWhitespace(text)
                 ? 1.0
                 : 0.0;
    }
    if (reference->is_number()) {
      return MathAnswerMatches(input.completion_text, NumberText(*reference)) ? 1.0 : 0.0;
    }
    constexpr absl::string_view kExpected = "a string, a number or an array of token ids";
    ASSIGN_OR_RETURN(const std::vector<int64_t> ids, Ids(index, *reference, kExpected));
    return std::equal(ids.begin(), ids.end(), input.completion_ids.begin(),
                      input.completion_ids.end())
               ? 1.0
               : 0.0;
  }
};

class TokenMatchReward : public ReferenceReward {
 public:
  explicit TokenMatchReward(std::string field) : ReferenceReward("token_match", std::move(field)) {}

 protected:
  absl::StatusOr<double> ScoreOne(const RewardInput& input, size_t index) const override {
    ASSIGN_OR_RETURN(const nlohmann::json* reference, Reference(input, index));
    ASSIGN_OR_RETURN(const std::vector<int64_t> ids,
                     Ids(index, *reference, "an array of token ids"));
    const std::vector<int32_t>& completion = input.completion_ids;
    const size_t longest = std::max(ids.size(), completion.size());
    if (longest == 0) return 1.0;
    const size_t shortest = std::min(ids.size(), completion.size());
    size_t same = 0;
    for (size_t i = 0; i < shortest; ++i) same += ids[i] == completion[i] ? 1 : 0;
    return static_cast<double>(same) / static_cast<double>(longest);
  }
};

class RegexReward : public PerInputReward {
 public:
  explicit RegexReward(std::unique_ptr<RE2> pattern) : pattern_(std::move(pattern)) {}

 protected:
  absl::StatusOr<double> ScoreOne(const RewardInput& input, size_t) const override {
    return RE2::PartialMatch(input.completion_text, *pattern_) ? 1.0 : 0.0;
  }

 private:
  const std::unique_ptr<RE2> pattern_;
};

// DAPO's soft overlong punishment on top of another reward.
class LengthPenalty : public RewardFunction {
 public:
  LengthPenalty(std::unique_ptr<RewardFunction> base, int64_t max_new_tokens, int64_t buffer,
                double weight)
      : base_(std::move(base)), max_(max_new_tokens), buffer_(buffer), weight_(weight) {}

  absl::StatusOr<std::vector<double>> Score(const std::vector<RewardInput>& inputs) override {
    ASSIGN_OR_RETURN(std::vector<double> rewards, base_->Score(inputs));
    for (size_t i = 0; i < inputs.size() && i < rewards.size(); ++i) {
      const int64_t length =
          inputs[i].truncated ? max_ : static_cast<int64_t>(inputs[i].completion_ids.size());
      const int64_t over = std::min(length - (max_ - buffer_), buffer_);
      if (over > 0) {
        rewards[i] -= weight_ * static_cast<double>(over) / static_cast<double>(buffer_);
      }
    }
    return rewards;
  }

 private:
  const std::unique_ptr<RewardFunction> base_;
  const int64_t max_;
  const int64_t buffer_;
  const double weight_;
};

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

absl::Status ValidateCommon(const RewardSpec& spec, const RewardContext& context) {
  const bool has_function = !spec.function.empty();
  const bool has_command = !spec.command.empty();
  if (has_function && has_command) {
    return Invalid(absl::StrCat("grpo.reward: both grpo.reward.function (\"", spec.function,
                                "\") and grpo.reward.command are set; give one of them"));
  }
  if (!has_function && !has_command) {
    return Invalid(
        "grpo.reward: neither grpo.reward.function nor grpo.reward.command is set; give one of "
        "them");
  }
  if (!std::isfinite(spec.timeout_s) || spec.timeout_s <= 0) {
    return Invalid(absl::StrCat("grpo.reward.timeout_s must be a positive number of seconds, got ",
                                spec.timeout_s));
  }
  if (spec.length_penalty_buffer < 0) {
    return Invalid(absl::StrCat("grpo.reward.length_penalty_buffer must be >= 0, got ",
                                spec.length_penalty_buffer));
  }
  if (spec.length_penalty_buffer > 0) {
    if (context.max_new_tokens <= 0) {
      return Invalid(absl::StrCat("grpo.reward.length_penalty_buffer (", spec.length_penalty_buffer,
                                  ") needs grpo.rollout.max_new_tokens > 0"));
    }
    if (spec.length_penalty_buffer > context.max_new_tokens) {
      return Invalid(absl::StrCat("grpo.reward.length_penalty_buffer (", spec.length_penalty_buffer,
                                  ") must not exceed grpo.rollout.max_new_tokens (",
                                  context.max_new_tokens, ")"));
    }
    if (!std::isfinite(spec.length_penalty_weight) || spec.length_penalty_weight < 0) {
      return Invalid(
          absl::StrCat("grpo.reward.length_penalty_weight must be a finite number >= 0, "
                       "got ",
                       spec.length_penalty_weight));
    }
  }
  if (!spec.pattern.empty() && spec.function != "regex") {
    return Invalid(absl::StrCat("grpo.reward.pattern is only used with grpo.reward.function regex",
                                has_function ? absl::StrCat(", not ", spec.function) : ""));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RewardFunction>> MakeBuiltin(const RewardSpec& spec) {
  const std::string& name = spec.function;
  const bool known =
      name == "math_answer" || name == "exact_match" || name == "token_match" || name == "regex";
  if (!known) {
    return Invalid(
        absl::StrCat("grpo.reward.function \"", name, "\" is not one of ", kFunctionNames));
  }
  if (name == "regex") {
    if (spec.pattern.empty()) {
      return Invalid("grpo.reward.pattern is required with grpo.reward.function regex");
    }
    RE2::Options options;
    options.set_log_errors(false);
    auto pattern = std::make_unique<RE2>(spec.pattern, options);
    if (!pattern->ok()) {
      return Invalid(absl::StrCat("grpo.reward.pattern \"", spec.pattern,
                                  "\" does not compile: ", pattern->error()));
    }
    return std::unique_ptr<RewardFunction>(new RegexReward(std::move(pattern)));
  }
  if (spec.reference_field.empty()) {
    return Invalid(
        absl::StrCat("grpo.reward.reference_field must name the prompt line's field "
                     "to compare against (grpo.reward.function ",
                     name, ")"));
  }
  if (name == "math_answer") {
    return std::unique_ptr<RewardFunction>(new MathAnswerReward(spec.reference_field));
  }
  if (name == "exact_match") {
    return std::unique_ptr<RewardFunction>(new ExactMatchReward(spec.reference_field));
  }
  return std::unique_ptr<RewardFunction>(new TokenMatchReward(spec.reference_field));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RewardFunction>> MakeRewardFunction(const RewardSpec& spec,
                                                                   const RewardContext& context) {
  RETURN_IF_ERROR(ValidateCommon(spec, context));
  std::unique_ptr<RewardFunction> reward;
  if (!spec.function.empty()) {
    ASSIGN_OR_RETURN(reward, MakeBuiltin(spec));
  } else {
    ASSIGN_OR_RETURN(reward, MakeRewardProgram(spec.command, spec.timeout_s, context));
  }
  if (spec.length_penalty_buffer > 0) {
    reward =
        std::make_unique<LengthPenalty>(std::move(reward), context.max_new_tokens,
                                        spec.length_penalty_buffer, spec.length_penalty_weight);
  }
  return reward;
}

}  // namespace sbp
