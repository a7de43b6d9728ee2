// Bearer-token authentication and the role check. Clients send
// "authorization: Bearer <token>"; the token's SHA-256 names an identity of
// the IdentityDirectory (the users file, or the token-file shorthand).
// JobService needs a user or admin identity, WorkerService and
// RendezvousService a worker identity. A role with no identity at all is
// open (only allowed on loopback unless --insecure): its callers get the
// "anonymous" identity, an admin for clients. Errors:
//   no token                       -> Unauthenticated "missing bearer token"
//   a token of no identity         -> Unauthenticated "invalid token"
//   the other role's token         -> PermissionDenied
//                                     "worker token cannot call streambp.v1.JobService/Submit"
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/identity.h"

namespace sbp::server {

enum class Role { kClient, kWorker };

class Authenticator {
 public:
  explicit Authenticator(std::shared_ptr<IdentityDirectory> identities)
      : identities_(std::move(identities)) {}

  // `authorization` is the header value, nullopt when absent; `method` the
  // full method name for messages.
  absl::StatusOr<Identity> Authorize(std::optional<absl::string_view> authorization, Role required,
                                     absl::string_view method) const;

  bool client_open() const { return !identities_->HasRole(IdentityRole::kUser); }
  bool worker_open() const { return !identities_->HasRole(IdentityRole::kWorker); }
  IdentityDirectory& identities() const { return *identities_; }

 private:
  std::shared_ptr<IdentityDirectory> identities_;
};

// Equality whose running time depends only on the lengths.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace sbp::server
