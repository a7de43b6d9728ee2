#include "worker/train/rollout/math_answer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <initializer_list>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace sbp {
namespace {

constexpr size_t kNpos = absl::string_view::npos;
// The longest {numerator} or {denominator} of a \frac read as a number in
// free text (a bound, so that scanning stays linear).
constexpr size_t kMaxFractionPart = 64;
// How many \boxed from the end are tried for a balanced one (each try may
// scan to the end of the text).
constexpr int kMaxBoxedTried = 16;
// Answers longer than this are not normalised (no real answer is that long,
// and normalisation recurses into nested braces): only equal text matches.
constexpr size_t kMaxNormalizedAnswer = 4096;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAlnum(char c) { return IsDigit(c) || IsLetter(c); }

// `s[pos]` is '{': the index just past its matching '}', kNpos when the
// braces do not balance within `limit` characters. "\{" and "\}" are
// literal braces and do not count.
size_t GroupEnd(absl::string_view s, size_t pos, size_t limit = kNpos) {
  int depth = 0;
  const size_t stop = limit == kNpos ? s.size() : std::min(s.size(), pos + limit);
  for (size_t i = pos; i < stop; ++i) {
    if (s[i] == '\\') {
      ++i;  // skip the escaped character
    } else if (s[i] == '{') {
      ++depth;
    } else if (s[i] == '}') {
      if (--depth == 0) return i + 1;
    }
  }
  return kNpos;
}

// Whether `s` has the control word `name` (e.g. "\left") at `pos`: the name
// and then no further letter ("\left" is not found in "\leftarrow").
bool CommandAt(absl::string_view s, size_t pos, absl::string_view name) {
  if (s.substr(pos, name.size()) != name) return false;
  const size_t end = pos + name.size();
  return end >= s.size() || !IsLetter(s[end]);
}

// Removes every occurrence of the control word `name`.
std::string RemoveCommand(absl::string_view s, absl::string_view name) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (CommandAt(s, i, name)) {
      i += name.size();
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

// Replaces the control word `from` by `to` everywhere.
std::string RenameCommand(absl::string_view s, absl::string_view from, absl::string_view to) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (CommandAt(s, i, from)) {
      absl::StrAppend(&out, to);
      i += from.size();
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

// One argument of a macro at `pos`: a {group} (its content) or a single
// character or control word. Sets *end past it; false when there is none.
bool MacroArgument(absl::string_view s, size_t pos, std::string* arg, size_t* end) {
  if (pos >= s.size()) return false;
  if (s[pos] == '{') {
    const size_t group_end = GroupEnd(s, pos);
    if (group_end == kNpos) return false;
    *arg = std::string(s.substr(pos + 1, group_end - pos - 2));
    *end = group_end;
    return true;
  }
  if (s[pos] == '}') return false;
  size_t stop = pos + 1;
  if (s[pos] == '\\') {
    while (stop < s.size() && IsLetter(s[stop])) ++stop;
    if (stop == pos + 1 && stop < s.size()) ++stop;  // "\," and the like
  }
  *arg = std::string(s.substr(pos, stop - pos));
  *end = stop;
  return true;
}

// Whether `s` is one term: nothing but a leading '-' outside brackets is an
// operator (+ - * / = ,), so that "a/b" needs no parentheses around it.
bool IsSingleTerm(absl::string_view s) {
  if (s.empty()) return false;
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\\' && i + 1 < s.size() && !IsLetter(s[i + 1])) {
      ++i;  // "\{", "\," ...
    } else if (c == '{' || c == '(' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ')' || c == ']') {
      --depth;
    } else if (depth == 0 && absl::string_view("+-*/=,").find(c) != kNpos) {
      if (!(c == '-' && i == 0)) return false;
    }
  }
  return true;
}

// \frac{a}{b} -> a/b, innermost first; a side that is not a single term is
// put in parentheses.
std::string ConvertFractions(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (CommandAt(s, i, "\\frac")) {
      std::string numerator, denominator;
      size_t after_numerator = 0, end = 0;
      if (MacroArgument(s, i + 5, &numerator, &after_numerator) &&
          MacroArgument(s, after_numerator, &denominator, &end)) {
        for (std::string* side : {&numerator, &denominator}) {
          *side = ConvertFractions(*side);
          if (!IsSingleTerm(*side)) *side = absl::StrCat("(", *side, ")");
        }
        absl::StrAppend(&out, numerator, "/", denominator);
        i = end;
        continue;
      }
    }
    out.push_back(s[i++]);
  }
  return out;
}

// \sqrt2 -> \sqrt{2}.
std::string BraceSqrtArgument(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (CommandAt(s, i, "\\sqrt") && i + 5 < s.size() && IsAlnum(s[i + 5])) {
      absl::StrAppend(&out, "\\sqrt{", s.substr(i + 5, 1), "}");
      i += 6;
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

// \text{...} and friends: unwrapped, or dropped when a unit (a trailing
// text-like group after other content, as in "5\text{cm}").
std::string UnwrapText(absl::string_view s) {
  static constexpr absl::string_view kUnitLike[] = {"\\text", "\\textrm", "\\mbox", "\\mathrm"};
  static constexpr absl::string_view kUnwrapOnly[] = {"\\textbf", "\\textit", "\\mathbf",
                                                      "\\mathit", "\\textsf", "\\mathsf"};
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '\\') {
      bool unit_like = false;
      size_t name_size = 0;
      for (absl::string_view name : kUnitLike) {
        if (CommandAt(s, i, name)) unit_like = true, name_size = name.size();
      }
      for (absl::string_view name : kUnwrapOnly) {
        if (CommandAt(s, i, name)) name_size = name.size();
      }
      const size_t open = i + name_size;
      const size_t end =
          name_size > 0 && open < s.size() && s[open] == '{' ? GroupEnd(s, open) : kNpos;
      if (end != kNpos) {
        const bool is_unit = unit_like && !out.empty() && end == s.size();
        if (!is_unit) absl::StrAppend(&out, UnwrapText(s.substr(open + 1, end - open - 2)));
        i = end;
        continue;
      }
    }
    out.push_back(s[i++]);
  }
  return out;
}

// "1,000,000" -> "1000000": commas between groups of exactly three digits
// after a leading group of one to three.
std::string RemoveThousandsSeparators(absl::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (!IsDigit(s[i]) || (i > 0 && (IsDigit(s[i - 1]) || s[i - 1] == '.'))) {
      out.push_back(s[i++]);
      continue;
    }
    size_t run = i;
    while (run < s.size() && IsDigit(s[run])) ++run;
    size_t end = run;
    int groups = 0;
    if (run - i <= 3) {
      while (end + 3 < s.size() && s[end] == ',' && IsDigit(s[end + 1]) && IsDigit(s[end + 2]) &&
             IsDigit(s[end + 3]) && (end + 4 == s.size() || !IsDigit(s[end + 4]))) {
        end += 4;
        ++groups;
      }
    }
    if (groups == 0) end = run;
    for (size_t k = i; k < end; ++k) {
      if (s[k] != ',') out.push_back(s[k]);
    }
    i = end;
  }
  return out;
}

// "x=5" -> "5" for one '=' after a short name.
std::string DropVariablePrefix(std::string s) {
  const size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq > 3 || s.find('=', eq + 1) != std::string::npos) {
    return s;
  }
  if (!IsLetter(s[0])) return s;
  for (size_t i = 1; i < eq; ++i) {
    if (!IsAlnum(s[i]) && s[i] != '_') return s;
  }
  return s.substr(eq + 1);
}

// Strips '{' '}' around the whole string when they match each other.
std::string StripOuterBraces(std::string s) {
  while (s.size() >= 2 && s.front() == '{' && GroupEnd(s, 0) == s.size()) {
    s = s.substr(1, s.size() - 2);
  }
  return s;
}

std::string StripTrailingPeriods(std::string s) {
  while (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// A plain decimal number ("-2.50", "+3", ".5", "1e-3"); nullopt otherwise.
std::optional<double> PlainNumber(absl::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  size_t digits = 0;
  while (i < s.size() && IsDigit(s[i])) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && IsDigit(s[i])) ++i, ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    size_t exponent_digits = 0;
    while (i < s.size() && IsDigit(s[i])) ++i, ++exponent_digits;
    if (exponent_digits == 0) return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  const std::string text(s);
  const double value = std::strtod(text.c_str(), nullptr);
  if (!std::isfinite(value)) return std::nullopt;
  return value;
}

// The end of a number token starting at `pos` in free text ("-1,000.5",
// "3/4", "\frac{1}{2}"), or kNpos when none starts there.
size_t NumberTokenEnd(absl::string_view s, size_t pos) {
  size_t i = pos;
  if (s[i] == '-') {
    if (pos > 0 && (IsAlnum(s[pos - 1]) || s[pos - 1] == ')' || s[pos - 1] == '}')) return kNpos;
    ++i;
  }
  if (i < s.size() && s[i] == '\\') {
    for (absl::string_view name : {"\\frac", "\\dfrac", "\\tfrac"}) {
      if (!CommandAt(s, i, name)) continue;
      const size_t open = i + name.size();
      if (open >= s.size() || s[open] != '{') return kNpos;
      const size_t mid = GroupEnd(s, open, kMaxFractionPart);
      if (mid == kNpos || mid >= s.size() || s[mid] != '{') return kNpos;
      const size_t end = GroupEnd(s, mid, kMaxFractionPart);
      if (end == kNpos) return kNpos;
      const bool numeric = PlainNumber(s.substr(open + 1, mid - open - 2)).has_value() &&
                           PlainNumber(s.substr(mid + 1, end - mid - 2)).has_value();
      return numeric ? end : kNpos;
    }
    return kNpos;
  }
  const size_t start = i;
  while (i < s.size() && IsDigit(s[i])) ++i;
  if (i - start >= 1 && i - start <= 3) {  // thousands groups
    while (i + 3 < s.size() && s[i] == ',' && IsDigit(s[i + 1]) && IsDigit(s[i + 2]) &&
           IsDigit(s[i + 3]) && (i + 4 == s.size() || !IsDigit(s[i + 4]))) {
      i += 4;
    }
  }
  const bool has_integer = i > start;
  if (i + 1 < s.size() && s[i] == '.' && IsDigit(s[i + 1])) {
    ++i;
    while (i < s.size() && IsDigit(s[i])) ++i;
  } else if (!has_integer) {
    return kNpos;
  }
  if (i + 1 < s.size() && s[i] == '/' && IsDigit(s[i + 1])) {
    ++i;
    while (i < s.size() && IsDigit(s[i])) ++i;
  }
  return i;
}

// The last number token in the text.
std::optional<std::string> LastNumber(absl::string_view s) {
  std::optional<std::string> last;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    const bool may_start = IsDigit(c) || c == '-' || c == '\\' || c == '.';
    // A digit right after a digit or '.' belongs to a token already seen.
    const bool inside = i > 0 && (IsDigit(c) || c == '.') && (IsDigit(s[i - 1]) || s[i - 1] == '.');
    const size_t end = may_start && !inside ? NumberTokenEnd(s, i) : kNpos;
    if (end == kNpos) {
      ++i;
    } else {
      last = std::string(s.substr(i, end - i));
      i = end;
    }
  }
  return last;
}

// The content of the last balanced \boxed{...} / \fbox{...} ("\boxed 5"
// too); nullopt when there is none.
std::optional<std::string> LastBoxed(absl::string_view s) {
  int tried = 0;
  for (size_t i = s.rfind('\\'); i != kNpos && tried < kMaxBoxedTried;
       i = i == 0 ? kNpos : s.rfind('\\', i - 1)) {
    size_t name_size = 0;
    if (CommandAt(s, i, "\\boxed")) name_size = 6;
    if (CommandAt(s, i, "\\fbox")) name_size = 5;
    if (name_size == 0) continue;
    ++tried;
    size_t pos = i + name_size;
    while (pos < s.size() && absl::ascii_isspace(static_cast<unsigned char>(s[pos]))) ++pos;
    if (pos < s.size() && s[pos] == '{') {
      const size_t end = GroupEnd(s, pos);
      if (end != kNpos) return std::string(s.substr(pos + 1, end - pos - 2));
    } else {  // "\boxed 5"
      size_t end = pos;
      while (end < s.size() && !absl::ascii_isspace(static_cast<unsigned char>(s[end])) &&
             s[end] != '$' && s[end] != '\\' && s[end] != '}') {
        ++end;
      }
      if (end > pos) return std::string(s.substr(pos, end - pos));
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> ExtractMathAnswer(absl::string_view text) {
  if (std::optional<std::string> boxed = LastBoxed(text)) return boxed;
  return LastNumber(text);
}

std::string NormalizeMathAnswer(absl::string_view answer) {
  std::string s(answer);
  if (s.size() > kMaxNormalizedAnswer) return s;
  if (absl::StrContains(s, "\\boxed") || absl::StrContains(s, "\\fbox")) {
    if (std::optional<std::string> boxed = LastBoxed(s)) s = *boxed;
  }
  // White space, LaTeX spacing and decoration.
  s = absl::StrReplaceAll(s, {{"\\ ", ""}, {"\\!", ""}, {"\\,", ""}, {"\\;", ""}, {"\\:", ""}});
  s.erase(std::remove_if(s.begin(), s.end(),
                         [](char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); }),
          s.end());
  s = absl::StrReplaceAll(
      s, {{"\\$", ""}, {"$", ""}, {"\\%", ""}, {"%", ""}, {"^{\\circ}", ""}, {"^\\circ", ""}});
  for (absl::string_view name : {"\\left", "\\right", "\\displaystyle"}) s = RemoveCommand(s, name);
  s = RenameCommand(s, "\\dfrac", "\\frac");
  s = RenameCommand(s, "\\tfrac", "\\frac");
  s = UnwrapText(StripTrailingPeriods(std::move(s)));
  s = absl::StrReplaceAll(s, {{"{,}", ","}});
  s = StripOuterBraces(StripTrailingPeriods(std::move(s)));
  s = ConvertFractions(BraceSqrtArgument(s));
  s = RemoveThousandsSeparators(s);
  s = StripOuterBraces(DropVariablePrefix(std::move(s)));
  return StripTrailingPeriods(std::move(s));
}

std::optional<double> MathAnswerValue(absl::string_view normalized) {
  const size_t slash = normalized.find('/');
  if (slash == kNpos) return PlainNumber(normalized);
  const std::optional<double> numerator = PlainNumber(normalized.substr(0, slash));
  const std::optional<double> denominator = PlainNumber(normalized.substr(slash + 1));
  if (!numerator || !denominator || *denominator == 0) return std::nullopt;
  const double value = *numerator / *denominator;
  if (!std::isfinite(value)) return std::nullopt;
  return value;
}

bool MathAnswersEqual(absl::string_view a, absl::string_view b) {
  const std::string na = NormalizeMathAnswer(a);
  const std::string nb = NormalizeMathAnswer(b);
  if (na.empty() || nb.empty()) return false;
  if (na == nb) return true;
  const std::optional<double> va = MathAnswerValue(na);
  const std::optional<double> vb = MathAnswerValue(nb);
  if (!va || !vb) return false;
  return *va == *vb || std::abs(*va - *vb) <= 1e-9 * std::max(std::abs(*va), std::abs(*vb));
}

bool MathAnswerMatches(absl::string_view completion_text, absl::string_view reference) {
  const std::optional<std::string> answer = ExtractMathAnswer(completion_text);
  return answer.has_value() && MathAnswersEqual(*answer, reference);
}

}  // namespace sbp
