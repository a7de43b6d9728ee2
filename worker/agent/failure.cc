#include "worker/agent/failure.h"

namespace sbp {

streambp::v1::FailureClass ClassifyFailure(const absl::Status& status) {
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
