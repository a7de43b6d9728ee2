#include "common/byte_size.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace sbp {
namespace {

struct Unit {
  const char* suffix;
  double factor;
};

// Longer suffixes first: "kib" before "ki", "kb" and "k", "ki" before "k".
constexpr Unit kUnits[] = {
    {"kib", 1024.0},
    {"mib", 1024.0 * 1024},
    {"gib", 1024.0 * 1024 * 1024},
    {"tib", 1099511627776.0},
    {"kb", 1e3},
    {"mb", 1e6},
    {"gb", 1e9},
    {"tb", 1e12},
    {"ki", 1024.0},  // Kubernetes' binary quantities
    {"mi", 1024.0 * 1024},
    {"gi", 1024.0 * 1024 * 1024},
    {"ti", 1099511627776.0},
    {"k", 1024.0},
    {"m", 1024.0 * 1024},
    {"g", 1024.0 * 1024 * 1024},
    {"t", 1099511627776.0},
    {"b", 1.0},
};

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  const std::string original(text);
  std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (lower.empty()) return absl::InvalidArgumentError("empty byte size");
  double factor = 1.0;
  absl::string_view number = lower;
  for (const Unit& unit : kUnits) {
    if (absl::ConsumeSuffix(&number, unit.suffix)) {
      factor = unit.factor;
      break;
    }
  }
  number = absl::StripAsciiWhitespace(number);
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(number, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid byte size '", original, "' (expected e.g. 8GiB, 512MiB, 1.5GB or 4096)"));
  }
  if (value < 0) {
    return absl::InvalidArgumentError(absl::StrCat("byte size '", original, "' is negative"));
  }
  const double bytes = value * factor;
  if (bytes >= static_cast<double>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("byte size '", original, "' is too large"));
  }
  return static_cast<int64_t>(std::llround(bytes));
}

std::string FormatByteSize(int64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const bool negative = bytes < 0;
  double value = std::fabs(static_cast<double>(bytes));
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char text[48];
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%s%lld B", negative ? "-" : "",
                  static_cast<long long>(std::fabs(static_cast<double>(bytes))));
  } else {
    std::snprintf(text, sizeof(text), "%s%.1f %s", negative ? "-" : "", value, kNames[unit]);
  }
  return text;
}

}  // namespace sbp
