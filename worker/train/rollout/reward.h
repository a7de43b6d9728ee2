// Rewards of online GRPO (grpo.reward in the job spec): one number per
// sampled completion, from a built-in function or a user program.
//
// Built-in functions (RewardSpec::function), each against the prompt line's
// reference field (RewardSpec::reference_field, "answer" by default):
//   math_answer  1 when the completion's answer equals the reference after
//                normalisation, else 0. The answer is the content of the
//                last \boxed{...} (balanced braces), else the last number in
//                the text. Normalisation: strip spaces and a trailing '.',
//                "$", "\!", thousands separators "1,000" -> "1000", \text{}
//                and units, \frac{a}{b} -> a/b, and numbers compare by value
//                (2.50 == 2.5, 1/2 == 0.5 == \frac{1}{2}); math_answer.h has
//                the details.
//   exact_match  1 when the completion equals the reference: text against a
//                string reference (surrounding white space ignored), ids
//                against an array-of-ids reference; else 0.
//   token_match  partial credit for id references: the number of positions
//                i with completion[i] == reference[i], divided by
//                max(len(completion), len(reference)) (1 for both empty).
//   regex        1 when RewardSpec::pattern matches anywhere in the
//                completion text, else 0. RE2 syntax (Perl/ECMAScript-like:
//                classes, groups, alternation, repeats, (?i); no
//                backreferences or lookaround), matched in linear time, so
//                neither a long completion nor a pathological pattern can
//                blow the stack or hang the step.
// A completion's ids exclude the stop/EOS token that ended it (RewardInput).
//
// Length penalty (DAPO's soft overlong punishment), added to any reward when
// length_penalty_buffer > 0, with L the completion length (its ids; M when
// truncated), M the job's max_new_tokens, B the buffer and w the weight:
//   0 for L <= M - B;   -w * (L - (M - B)) / B for M - B < L <= M.
//
// Reference fields: math_answer takes a string ("\frac{1}{2}", "1,000") or a
// number; exact_match a string (text), a number (compared as math_answer
// does) or an array of ids; token_match an array of ids. A missing field or
// one of another type is InvalidArgument naming the completion's index.
// The text functions see "" for the text when the job has no tokenizer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "worker/train/job_spec.h"

namespace sbp {

// One completion to score, with everything a reward may look at.
struct RewardInput {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> completion_ids;  // without the token or stop sequence that ended it
  std::string prompt_text;              // "" when the job has no tokenizer
  std::string completion_text;          // "" when the job has no tokenizer
  nlohmann::json fields = nlohmann::json::object();  // the prompt line's other fields
  bool truncated = false;                            // ended at max_new_tokens
};

// Where a reward program runs and where its stderr goes.
struct RewardContext {
  std::string working_dir = ".";  // the job's run directory
  int64_t max_new_tokens = 0;     // for the length penalty
  // Each line the program writes to stderr (without its newline).
  std::function<void(const std::string&)> on_stderr_line;
};

class RewardFunction {
 public:
  virtual ~RewardFunction() = default;
  // One reward per input, in order. Errors (a missing reference field, a
  // program that fails) name the input's index and what is wrong.
  virtual absl::StatusOr<std::vector<double>> Score(const std::vector<RewardInput>& inputs) = 0;
};

// The reward of `spec` (length penalty included). InvalidArgument naming the
// `grpo.reward.<field>` when the spec is unusable (unknown function, a regex
// that does not compile, neither or both of function and command, timeout_s
// not > 0, a length_penalty_buffer < 0 or > max_new_tokens, or > 0 without
// max_new_tokens, a pattern without function regex). A command runs as
// described in reward_program.h.
absl::StatusOr<std::unique_ptr<RewardFunction>> MakeRewardFunction(const RewardSpec& spec,
                                                                   const RewardContext& context);

}  // namespace sbp
