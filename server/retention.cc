#include "server/retention.h"

#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sbp::server {

absl::StatusOr<absl::Duration> ParseRetentionAge(absl::string_view text) {
  if (text == "0") return absl::ZeroDuration();
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an age like 30d, 12h, 90m or 3600s, or 0 to keep ended jobs (got \"",
                     text, "\")"));
  };
  if (text.size() < 2) return bad();
  const char unit = text.back();
  int64_t count = 0;
  if (!absl::SimpleAtoi(text.substr(0, text.size() - 1), &count) || count < 0 ||
      count > (int64_t{1} << 40)) {
    return bad();
  }
  switch (unit) {
    case 's':
      return absl::Seconds(count);
    case 'm':
      return absl::Minutes(count);
    case 'h':
      return absl::Hours(count);
    case 'd':
      return absl::Hours(24 * count);
    default:
      return bad();
  }
}

}  // namespace sbp::server
