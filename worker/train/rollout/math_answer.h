// Final answers of math completions, for the `math_answer` reward
// (reward.h): find the answer in a completion, bring it and the reference
// to one canonical form, and compare.
//
// Extraction: the content of the last \boxed{...} or \fbox{...} (balanced
// braces, so \boxed{\frac{1}{2}} gives \frac{1}{2}; also "\boxed 5"; one
// whose braces never close is passed over), else the last number in the
// text ("-3", "1,000", "2.5", "3/4", "\frac{1}{2}"); none: no answer.
//
// Normalisation (NormalizeMathAnswer), in order:
//   - drop white space, "$", "\$", "\!", "\,", "\;", "\:", "\left", "\right",
//     "\%", "%", degree marks (^\circ, ^{\circ}) and trailing '.';
//   - \dfrac/\tfrac -> \frac; \text{..}, \textbf{..}, \mathrm{..},
//     \mathbf{..}, \mbox{..} unwrap to their content, except a trailing one
//     after other content, which is a unit and is dropped ("5\text{ cm}" ->
//     "5"); "{,}" -> ",";
//   - \frac{a}{b} and \frac ab -> a/b (each side in parentheses unless it is
//     a single term: \frac{x+1}{2} -> (x+1)/2); \sqrt2 -> \sqrt{2};
//   - thousands separators: "1,000,000" -> "1000000" (only comma groups of
//     exactly three digits);
//   - one leading "x=" (a short variable name and '=') is dropped.
// Answers over 4096 characters are left as they are.
// Comparison (MathAnswersEqual): equal normalised text, or both numbers
// ("-2.50", "1/2", "1e3", ".5"; fractions are number/number) of the same
// value within a relative 1e-9.
#pragma once

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace sbp {

// The completion's final answer, not yet normalised; nullopt when the text
// has neither a \boxed{...} nor a number.
std::optional<std::string> ExtractMathAnswer(absl::string_view text);

// The canonical form of an answer (see the file comment).
std::string NormalizeMathAnswer(absl::string_view answer);

// The value of a normalised answer that is a plain number or a fraction of
// two plain numbers; nullopt otherwise (also for a zero denominator and
// non-finite values).
std::optional<double> MathAnswerValue(absl::string_view normalized);

// Whether two answers (raw; each is normalised here) are the same: equal
// canonical text or equal numeric value. Answers that normalise to "" are
// never equal to anything.
bool MathAnswersEqual(absl::string_view a, absl::string_view b);

// Whether the completion text's final answer equals `reference` (a raw
// answer: "\frac{1}{2}", "0.5", or itself a \boxed{...}).
bool MathAnswerMatches(absl::string_view completion_text, absl::string_view reference);

}  // namespace sbp
