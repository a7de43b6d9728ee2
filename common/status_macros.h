// Status propagation helpers. The Abseil release in Debian 12 (20220623) has
// absl::Status/StatusOr but not the RETURN_IF_ERROR / ASSIGN_OR_RETURN macros.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SBP_STATUS_CONCAT_INNER(a, b) a##b
#define SBP_STATUS_CONCAT(a, b) SBP_STATUS_CONCAT_INNER(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)                                     \
  do {                                                            \
    ::absl::Status sbp_status_ = (expr);                          \
    if (!sbp_status_.ok()) return sbp_status_;                    \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares/assigns x from a StatusOr or
// returns its error.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  SBP_ASSIGN_OR_RETURN_IMPL(SBP_STATUS_CONCAT(sbp_statusor_, __LINE__), lhs, rexpr)

#define SBP_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                              \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = std::move(tmp).value()

namespace sbp {

// Prefixes an error's message with context ("reading x.json: ...") and keeps
// its code. OK passes through unchanged.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace sbp
