#include "client/coordinator_client.h"

#include <cstdio>
#include <cstdlib>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli_common.h"
#include "common/bearer_token.h"
#include "common/status_macros.h"
#include "worker/agent/coordinator_channel.h"
#include "worker/model/file_util.h"

namespace sbp::cli {
namespace {

namespace v1 = streambp::v1;
using std::chrono::milliseconds;

constexpr milliseconds kCallTimeout{30000};

absl::StatusOr<std::string> ResolveToken(const GlobalOptions& options) {
  if (!options.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadBearerTokenFile(options.token_file);
    if (!token.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file: ", token.status().message()));
    }
    return token;
  }
  const char* env = std::getenv("SBP_TOKEN");
  if (env == nullptr || absl::StripAsciiWhitespace(env).empty()) return std::string();
  return ParseBearerToken(env, "$SBP_TOKEN");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const GlobalOptions& options) {
  ASSIGN_OR_RETURN(std::string token, ResolveToken(options));
  return Connect(options.coordinator, token, options.tls_ca);
}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const std::string& address, const std::string& token, const std::string& tls_ca) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   CreateCoordinatorChannel({address, token, tls_ca}));
  return std::unique_ptr<CoordinatorClient>(
      new CoordinatorClient(address, token, v1::JobService::NewStub(channel)));
}

void CoordinatorClient::Prepare(grpc::ClientContext& context, milliseconds timeout) const {
  PrepareContext(context, token_, timeout);
}

template <typename Response, typename Request, typename Method>
absl::StatusOr<Response> CoordinatorClient::Unary(Method method, const Request& request) {
  grpc::ClientContext context;
  Prepare(context, kCallTimeout);
  Response response;
  RETURN_IF_ERROR(FromGrpcStatus((stub_.get()->*method)(&context, request, &response)));
  return response;
}

absl::StatusOr<v1::SubmitJobResponse> CoordinatorClient::Submit(const std::string& spec_yaml,
                                                                const std::string& request_id) {
  v1::SubmitJobRequest request;
  request.set_spec_yaml(spec_yaml);
  request.set_request_id(request_id);
  return Unary<v1::SubmitJobResponse>(&v1::JobService::Stub::Submit, request);
}

absl::StatusOr<v1::Job> CoordinatorClient::Get(const std::string& id) {
  v1::GetJobRequest request;
  request.set_id(id);
  return Unary<v1::Job>(&v1::JobService::Stub::Get, request);
}

absl::StatusOr<v1::ListJobsResponse> CoordinatorClient::List(
    const std::vector<v1::JobState>& states, int limit, bool with_spec, const std::string& user) {
  v1::ListJobsResponse all;
  std::string token;
  do {
    v1::ListJobsRequest request;
    for (v1::JobState s : states) request.add_states(s);
    const int left = limit > 0 ? limit - all.jobs_size() : 100;
    request.set_page_size(std::min(left, 100));
    request.set_page_token(token);
    request.set_with_spec(with_spec);
    request.set_user(user);
    ASSIGN_OR_RETURN(v1::ListJobsResponse page,
                     Unary<v1::ListJobsResponse>(&v1::JobService::Stub::List, request));
    for (v1::Job& job : *page.mutable_jobs()) *all.add_jobs() = std::move(job);
    token = page.next_page_token();
  } while (!token.empty() && (limit <= 0 || all.jobs_size() < limit));
  all.set_next_page_token(token);
  return all;
}

absl::StatusOr<v1::Job> CoordinatorClient::Cancel(const std::string& id,
                                                  const std::string& reason) {
  v1::CancelJobRequest request;
  request.set_id(id);
  request.set_reason(reason);
  return Unary<v1::Job>(&v1::JobService::Stub::Cancel, request);
}

absl::StatusOr<v1::JobEventsResponse> CoordinatorClient::Events(const std::string& id,
                                                                int64_t after_sequence) {
  v1::JobEventsRequest request;
  request.set_id(id);
  request.set_after_sequence(after_sequence);
  return Unary<v1::JobEventsResponse>(&v1::JobService::Stub::Events, request);
}

absl::StatusOr<v1::WhoAmIResponse> CoordinatorClient::WhoAmI() {
  return Unary<v1::WhoAmIResponse>(&v1::JobService::Stub::WhoAmI, v1::WhoAmIRequest());
}

absl::StatusOr<v1::ListWorkersResponse> CoordinatorClient::ListWorkers() {
  return Unary<v1::ListWorkersResponse>(&v1::JobService::Stub::ListWorkers,
                                        v1::ListWorkersRequest());
}

absl::Status CoordinatorClient::Watch(const std::string& id,
                                      const std::function<bool(const v1::Job&)>& on_update) {
  v1::WatchJobRequest request;
  request.set_id(id);
  grpc::ClientContext context;
  if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
  std::unique_ptr<grpc::ClientReader<v1::JobUpdate>> reader = stub_->Watch(&context, request);
  v1::JobUpdate update;
  while (reader->Read(&update)) {
    if (!on_update(update.job())) {
      context.TryCancel();
      while (reader->Read(&update)) {
      }
      (void)reader->Finish();
      return absl::OkStatus();
    }
  }
  return FromGrpcStatus(reader->Finish());
}

absl::Status CoordinatorClient::StreamOutput(
    Output kind, const v1::JobOutputRequest& request,
    const std::function<bool(const v1::JobOutputChunk&)>& on_chunk) {
  grpc::ClientContext context;
  if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
  std::unique_ptr<grpc::ClientReader<v1::JobOutputChunk>> reader =
      kind == Output::kMetrics ? stub_->Metrics(&context, request) : stub_->Logs(&context, request);
  v1::JobOutputChunk chunk;
  while (reader->Read(&chunk)) {
    if (!on_chunk(chunk)) {
      context.TryCancel();
      while (reader->Read(&chunk)) {
      }
      (void)reader->Finish();
      return absl::OkStatus();
    }
  }
  return FromGrpcStatus(reader->Finish());
}

std::string NewRequestId() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device());
  const uint64_t a = rng(), b = rng();
  return absl::StrFormat("%08x-%04x-4%03x-%04x-%012x", a >> 32, (a >> 16) & 0xffff, a & 0xfff,
                         0x8000 | ((b >> 48) & 0x3fff), b & 0xffffffffffffULL);
}

int ReportRpcError(const std::string& command, const absl::Status& status) {
  std::fprintf(stderr, "sbp %s: %s\n", command.c_str(), std::string(status.message()).c_str());
  // A job the coordinator's admission refuses (no registered worker can hold
  // it) is bad input, as `sbp run` reports it.
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kResourceExhausted:
      return 2;
    default:
      return 1;
  }
}

std::unique_ptr<CoordinatorClient> ConnectOrReport(const GlobalOptions& global,
                                                   const std::string& command, int* code) {
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Connect(global);
  if (!client.ok()) {
    *code = ReportError(command, client.status());
    return nullptr;
  }
  return *std::move(client);
}

}  // namespace sbp::cli
