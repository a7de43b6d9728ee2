// Bearer-token authorization. Clients send "authorization: Bearer <token>";
// JobService needs the client token, WorkerService and RendezvousService the
// worker token. A role without a configured token is open. Errors:
//   no token                       -> Unauthenticated "missing bearer token"
//   a token of neither role        -> Unauthenticated "invalid token"
//   the other role's token         -> PermissionDenied
//                                     "worker token cannot call streambp.v1.JobService/Submit"
// Tokens are compared in constant time.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sbp::server {

enum class Role { kClient, kWorker };

class Authenticator {
 public:
  Authenticator(std::string client_token, std::string worker_token)
      : client_token_(std::move(client_token)), worker_token_(std::move(worker_token)) {}

  // `authorization` is the header value, nullopt when absent; `method` the
  // full method name for messages.
  absl::Status Authorize(std::optional<absl::string_view> authorization, Role required,
                         absl::string_view method) const;

  bool client_open() const { return client_token_.empty(); }
  bool worker_open() const { return worker_token_.empty(); }

 private:
  std::string client_token_;
  std::string worker_token_;
};

// Equality whose running time depends only on the lengths.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace sbp::server
