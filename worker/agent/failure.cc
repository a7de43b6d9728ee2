#include "worker/agent/failure.h"

#include <optional>

#include "common/failure_kind.h"

namespace sbp {

streambp::v1::FailureClass ClassifyFailure(const absl::Status& status) {
  if (const std::optional<FailureKind> kind = GetFailureKind(status); kind.has_value()) {
    switch (*kind) {
      case FailureKind::kStorage:
        return streambp::v1::FAILURE_CLASS_STORAGE;
      case FailureKind::kDiverged:
        return streambp::v1::FAILURE_CLASS_DIVERGED;
      case FailureKind::kStaleAttempt:
        return streambp::v1::FAILURE_CLASS_LOST_WORKER;  // the coordinator has moved on
    }
  }
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return streambp::v1::FAILURE_CLASS_UNSPECIFIED;
    case absl::StatusCode::kResourceExhausted:
      return streambp::v1::FAILURE_CLASS_OUT_OF_MEMORY;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return streambp::v1::FAILURE_CLASS_BAD_INPUT;
    default:
      return streambp::v1::FAILURE_CLASS_INTERNAL;
  }
}

}  // namespace sbp
