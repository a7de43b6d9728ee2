// The `sbp` job verbs' connection to a coordinator: global flags
// (--coordinator / SBP_COORDINATOR, --token-file / SBP_TOKEN, --tls-ca), the
// channel and JobService stub, and one method per RPC returning absl::Status
// (messages start with the gRPC code name, e.g. "UNAUTHENTICATED: ...").
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "streambp/v1/jobs.grpc.pb.h"

namespace sbp::cli {

struct GlobalOptions {
  std::string coordinator = "127.0.0.1:7700";
  std::string token_file;  // "" = $SBP_TOKEN (if set)
  std::string tls_ca;
};

class CoordinatorClient {
 public:
  // Reads the token (file or $SBP_TOKEN) and opens the channel; errors are
  // InvalidArgument (bad flags).
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(const GlobalOptions& options);
  // An explicit address and token (the embedded coordinator of `sbp run`).
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(const std::string& address,
                                                                    const std::string& token,
                                                                    const std::string& tls_ca);

  absl::StatusOr<streambp::v1::SubmitJobResponse> Submit(const std::string& spec_yaml,
                                                         const std::string& request_id);
  absl::StatusOr<streambp::v1::Job> Get(const std::string& id);
  // Every page up to `limit` jobs (0: all).
  // `user`: an admin's filter by owner ("" = every job the caller may see).
  absl::StatusOr<streambp::v1::ListJobsResponse> List(
      const std::vector<streambp::v1::JobState>& states, int limit, bool with_spec = false,
      const std::string& user = "");
  absl::StatusOr<streambp::v1::Job> Cancel(const std::string& id, const std::string& reason);
  absl::StatusOr<streambp::v1::JobEventsResponse> Events(const std::string& id,
                                                         int64_t after_sequence);
  absl::StatusOr<streambp::v1::ListWorkersResponse> ListWorkers();
  absl::StatusOr<streambp::v1::WhoAmIResponse> WhoAmI();
  // Streams the job: `on_update` gets the snapshot and every change until the
  // job is terminal (OK), `on_update` returns false (OK) or the stream fails.
  absl::Status Watch(const std::string& id,
                     const std::function<bool(const streambp::v1::Job&)>& on_update);
  // A job's metrics or log lines (JobService.Metrics / Logs, job_output.proto):
  // `on_chunk` gets each message until the stream ends (OK), `on_chunk`
  // returns false (OK) or the stream fails. client/metrics_client.h reads
  // on from the last cursor after a failure.
  enum class Output { kMetrics, kLogs };
  absl::Status StreamOutput(
      Output kind, const streambp::v1::JobOutputRequest& request,
      const std::function<bool(const streambp::v1::JobOutputChunk&)>& on_chunk);

  const std::string& address() const { return address_; }

 private:
  CoordinatorClient(std::string address, std::string token,
                    std::unique_ptr<streambp::v1::JobService::Stub> stub)
      : address_(std::move(address)), token_(std::move(token)), stub_(std::move(stub)) {}
  void Prepare(grpc::ClientContext& context, std::chrono::milliseconds timeout) const;
  // One unary call of the stub with the token and the default deadline.
  template <typename Response, typename Request, typename Method>
  absl::StatusOr<Response> Unary(Method method, const Request& request);

  std::string address_;
  std::string token_;
  std::unique_ptr<streambp::v1::JobService::Stub> stub_;
};

// A new random request id ("8-4-4-4-12" hex, like a UUID v4).
std::string NewRequestId();

// Prints "sbp <command>: <message>" to stderr; returns 2 for INVALID_ARGUMENT,
// NOT_FOUND and RESOURCE_EXHAUSTED (a job admission refuses), 1 for every
// other failed RPC.
int ReportRpcError(const std::string& command, const absl::Status& status);

// Connect(global), or prints why not as `sbp <command>: ...` and returns
// nullptr with *code set to the exit code (the job verbs' common opening).
std::unique_ptr<CoordinatorClient> ConnectOrReport(const GlobalOptions& global,
                                                   const std::string& command, int* code);

}  // namespace sbp::cli
