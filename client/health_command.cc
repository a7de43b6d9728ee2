#include "client/health_command.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/cli_common.h"
#include "google/protobuf/unknown_field_set.h"
#include "worker/agent/coordinator_channel.h"
#include "worker/model/file_util.h"

namespace sbp::cli {
namespace {

struct HealthArgs {
  std::string service;      // "" asks about the whole server
  std::string server_name;  // TLS name to verify instead of the address's host
  double timeout_seconds = 5;
};

// grpc.health.v1.HealthCheckResponse.ServingStatus names.
const char* StatusName(int64_t status) {
  switch (status) {
    case 1:
      return "SERVING";
    case 2:
      return "NOT_SERVING";
    case 3:
      return "SERVICE_UNKNOWN";
    default:
      return "UNKNOWN";
  }
}

// HealthCheckRequest{service = 1 (string)} in the protobuf wire format.
std::string EncodeRequest(const std::string& service) {
  google::protobuf::UnknownFieldSet fields;
  if (!service.empty()) fields.AddLengthDelimited(1, service);
  std::string bytes;
  fields.SerializeToString(&bytes);
  return bytes;
}

// HealthCheckResponse{status = 1 (enum)}: the status (absent: UNKNOWN), or -1
// when the bytes are not a protobuf message.
int64_t DecodeStatus(const std::string& bytes) {
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromString(bytes)) return -1;
  int64_t status = 0;
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& field = fields.field(i);
    if (field.number() != 1) continue;
    if (field.type() != google::protobuf::UnknownField::TYPE_VARINT) return -1;
    status = static_cast<int64_t>(field.varint());
  }
  return status;
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Dump(&slices).ok()) return bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const GlobalOptions& global,
                                                           const HealthArgs& args) {
  grpc::ChannelArguments channel_args;
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!global.tls_ca.empty()) {
    absl::StatusOr<std::string> roots = ReadFileToString(global.tls_ca);
    if (!roots.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--tls-ca: ", roots.status().message()));
    }
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = *roots;
    credentials = grpc::SslCredentials(ssl);
    if (!args.server_name.empty()) channel_args.SetSslTargetNameOverride(args.server_name);
  } else if (!args.server_name.empty()) {
    return absl::InvalidArgumentError("--tls-server-name: needs --tls-ca");
  }
  return grpc::CreateCustomChannel(global.coordinator, credentials, channel_args);
}

int Health(const GlobalOptions& global, const HealthArgs& args) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = OpenChannel(global, args);
  if (!channel.ok()) return ReportError("health", channel.status());
  grpc::GenericStub stub(*channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(args.timeout_seconds)));
  const std::string request_bytes = EncodeRequest(args.service);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();  // the deadline bounds the wait
  if (!status.ok()) {
    std::fprintf(stderr, "sbp health: %s: %s\n", global.coordinator.c_str(),
                 std::string(FromGrpcStatus(status).message()).c_str());
    return kExitFailed;
  }
  const int64_t serving = DecodeStatus(Flatten(response));
  if (serving < 0) {
    std::fprintf(stderr, "sbp health: %s: malformed health response\n", global.coordinator.c_str());
    return kExitFailed;
  }
  std::printf("%s\n", StatusName(serving));
  return serving == 1 ? kExitOk : kExitFailed;
}

}  // namespace

void AddHealthCommand(CLI::App& app, const GlobalOptions* global, int* exit_code) {
  auto args = std::make_shared<HealthArgs>();
  CLI::App* health = app.add_subcommand(
      "health", "check that the coordinator serves (grpc.health.v1; needs no token)");
  health->add_option("--service", args->service,
                     "service to ask about (default: the whole server)");
  health->add_option("--tls-server-name", args->server_name,
                     "name the TLS certificate must carry (default: the address's host)");
  health->add_option("--timeout", args->timeout_seconds, "seconds to wait for an answer")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  health->callback([global, args, exit_code] { *exit_code = Health(*global, *args); });
}

}  // namespace sbp::cli
