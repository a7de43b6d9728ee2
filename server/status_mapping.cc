#include "server/status_mapping.h"

#include <string>

namespace sbp::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode share the canonical numbering 0..16.
  const int code = static_cast<int>(status.code());
  const grpc::StatusCode grpc_code =
      code >= 0 && code <= 16 ? static_cast<grpc::StatusCode>(code) : grpc::StatusCode::UNKNOWN;
  return grpc::Status(grpc_code, std::string(status.message()));
}

}  // namespace sbp::server
