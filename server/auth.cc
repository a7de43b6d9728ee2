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

absl::StatusOr<Identity> Authenticator::Authorize(std::optional<absl::string_view> authorization,
                                                  Role required, absl::string_view method) const {
  const bool open = required == Role::kClient ? client_open() : worker_open();
  absl::string_view token;
  if (authorization.has_value()) {
    absl::string_view value = absl::StripAsciiWhitespace(*authorization);
    if (value.size() > 7 && absl::StartsWithIgnoreCase(value, "bearer ")) {
      token = absl::StripAsciiWhitespace(value.substr(7));
    }
  }
  if (open) {
    // An open role: any caller, as the anonymous identity.
    return required == Role::kClient ? Identity{"anonymous", IdentityRole::kAdmin, {}}
                                     : Identity{"anonymous", IdentityRole::kWorker, {}};
  }
  if (token.empty()) return absl::UnauthenticatedError("missing bearer token");
  const std::optional<Identity> identity = identities_->Lookup(token);
  if (!identity.has_value()) return absl::UnauthenticatedError("invalid token");
  if ((required == Role::kWorker) != identity->is_worker()) {
    return absl::PermissionDeniedError(
        absl::StrCat(identity->is_worker() ? "worker" : "client", " token cannot call ", method));
  }
  return *identity;
}

}  // namespace sbp::server
