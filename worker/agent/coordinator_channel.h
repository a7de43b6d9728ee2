// The gRPC plumbing shared by the worker agent and the `sbp` client: a channel
// to the coordinator (plaintext or TLS, reconnecting quickly after an outage),
// the bearer token on each call, and the one mapping grpc::Status ->
// absl::Status on the calling side.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sbp {

struct ChannelOptions {
  std::string address;      // "host:port"
  std::string token;        // bearer token; "" sends none
  std::string tls_ca_path;  // PEM roots; "" connects in plaintext
};

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateCoordinatorChannel(
    const ChannelOptions& options);

// Adds `authorization: Bearer <token>` (unless `token` is empty) and a deadline.
void PrepareContext(grpc::ClientContext& context, const std::string& token,
                    std::chrono::milliseconds timeout);

// Same code; the message starts with the code's name ("UNAVAILABLE: ..."), so
// a user sees it wherever the status is printed.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace sbp
