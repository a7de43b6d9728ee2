#include "server/auth.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace sbp::server {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

absl::Status Authenticator::Authorize(std::optional<absl::string_view> authorization, Role required,
                                      absl::string_view method) const {
  const std::string& wanted = required == Role::kClient ? client_token_ : worker_token_;
  if (wanted.empty()) return absl::OkStatus();
  absl::string_view token;
  if (authorization.has_value()) {
    absl::string_view value = absl::StripAsciiWhitespace(*authorization);
    if (value.size() > 7 && absl::StartsWithIgnoreCase(value, "bearer ")) {
      token = absl::StripAsciiWhitespace(value.substr(7));
    }
  }
  if (token.empty()) return absl::UnauthenticatedError("missing bearer token");
  if (ConstantTimeEquals(token, wanted)) return absl::OkStatus();
  const std::string& other = required == Role::kClient ? worker_token_ : client_token_;
  if (!other.empty() && ConstantTimeEquals(token, other)) {
    return absl::PermissionDeniedError(absl::StrCat(required == Role::kClient ? "worker" : "client",
                                                    " token cannot call ", method));
  }
  return absl::UnauthenticatedError("invalid token");
}

}  // namespace sbp::server
