#include "worker/agent/coordinator_channel.h"

#include "absl/strings/str_cat.h"
#include "worker/model/file_util.h"

namespace sbp {

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateCoordinatorChannel(
    const ChannelOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("no coordinator address given");
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.tls_ca_path.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    absl::StatusOr<std::string> roots = ReadFileToString(options.tls_ca_path);
    if (!roots.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--tls-ca: ", roots.status().message()));
    }
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = *roots;
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  // gRPC backs off up to two minutes between reconnects by default; a restarted
  // coordinator should be found within seconds.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  return grpc::CreateCustomChannel(options.address, credentials, args);
}

void PrepareContext(grpc::ClientContext& context, const std::string& token,
                    std::chrono::milliseconds timeout) {
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  context.set_deadline(std::chrono::system_clock::now() + timeout);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  std::string message = status.error_message();
  if (code == absl::StatusCode::kUnavailable && message.empty())
    message = "coordinator unreachable";
  return absl::Status(code, absl::StrCat(absl::StatusCodeToString(code), ": ", message));
}

}  // namespace sbp
