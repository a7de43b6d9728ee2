#include "common/failure_kind.h"

#include <cerrno>
#include <string>

#include "absl/strings/cord.h"

namespace sbp {
namespace {

constexpr absl::string_view kPayloadUrl = "type.streambp.dev/sbp.FailureKind";

absl::string_view KindText(FailureKind kind) {
  switch (kind) {
    case FailureKind::kStorage:
      return "storage";
    case FailureKind::kDiverged:
      return "diverged";
    case FailureKind::kStaleAttempt:
      return "stale-attempt";
  }
  return "";
}

}  // namespace

absl::Status WithFailureKind(absl::Status status, FailureKind kind) {
  if (!status.ok()) status.SetPayload(kPayloadUrl, absl::Cord(KindText(kind)));
  return status;
}

std::optional<FailureKind> GetFailureKind(const absl::Status& status) {
  const auto payload = status.GetPayload(kPayloadUrl);
  if (!payload.has_value()) return std::nullopt;
  const std::string text(*payload);
  for (FailureKind kind :
       {FailureKind::kStorage, FailureKind::kDiverged, FailureKind::kStaleAttempt}) {
    if (text == KindText(kind)) return kind;
  }
  return std::nullopt;
}

bool IsStorageErrno(int error) {
  return error == ENOSPC || error == EDQUOT || error == EIO || error == EROFS;
}

absl::Status FileOperationError(absl::string_view message, int error) {
  if (IsStorageErrno(error)) {
    return WithFailureKind(absl::UnavailableError(message), FailureKind::kStorage);
  }
  return absl::InternalError(message);
}

}  // namespace sbp
