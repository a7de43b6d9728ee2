// The one place where an absl::Status becomes a grpc::Status: same code
// (the numeric values agree), same message.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace sbp::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace sbp::server
