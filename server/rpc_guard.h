// What every handler does around its body: check the bearer token for the
// method's role, run the body, count the request by method and code, and map
// the result to a grpc::Status (through ToGrpcStatus, the only mapping).
#pragma once

#include <grpcpp/server_context.h>

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/status_mapping.h"

namespace sbp::server {

// The value of the request's "authorization" metadata, if any.
std::optional<absl::string_view> AuthorizationHeader(const grpc::ServerContext& context);

class RpcGuard {
 public:
  RpcGuard(const Authenticator* auth, Metrics* metrics) : auth_(auth), metrics_(metrics) {}

  template <typename Body>
  grpc::Status Run(const grpc::ServerContext& context, Role role, absl::string_view method,
                   Body&& body) const {
    absl::Status status = auth_->Authorize(AuthorizationHeader(context), role, method);
    if (status.ok()) status = std::forward<Body>(body)();
    Record(method, status);
    return ToGrpcStatus(status);
  }

 private:
  void Record(absl::string_view method, const absl::Status& status) const;

  const Authenticator* auth_;
  Metrics* metrics_;
};

}  // namespace sbp::server
