#include "server/rpc_guard.h"

#include "common/logging.h"

namespace sbp::server {

std::optional<absl::string_view> AuthorizationHeader(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  return absl::string_view(it->second.data(), it->second.size());
}

void RpcGuard::Record(absl::string_view method, const absl::Status& status) const {
  metrics_->CountRequest(method, absl::StatusCodeToString(status.code()));
  if (status.code() == absl::StatusCode::kInternal ||
      status.code() == absl::StatusCode::kDataLoss || status.code() == absl::StatusCode::kUnknown) {
    LOG(ERROR) << method << ": " << status;
  } else if (!status.ok()) {
    LOG(DEBUG) << method << ": " << status;
  }
}

}  // namespace sbp::server
