// streambp.v1.JobService: validates requests, converts messages and delegates
// to the JobManager. Needs the client token. Unary methods use the gRPC sync
// API; Watch is a callback stream, so that an open watch holds no server
// thread (see rpc_guard.h for the limits on both).
#pragma once

#include <memory>

#include "server/job_manager.h"
#include "server/job_output_stream.h"
#include "server/rpc_guard.h"
#include "server/watch_hub.h"
#include "streambp/v1/jobs.grpc.pb.h"

namespace sbp::server {

class JobServiceImpl final : public streambp::v1::JobService::WithCallbackMethod_Watch<
                                 streambp::v1::JobService::WithCallbackMethod_Metrics<
                                     streambp::v1::JobService::WithCallbackMethod_Logs<
                                         streambp::v1::JobService::Service>>> {
 public:
  JobServiceImpl(JobManager* manager, WatchHub* hub, const RpcGuard* guard);
  ~JobServiceImpl() override;

  grpc::Status Submit(grpc::ServerContext* context, const streambp::v1::SubmitJobRequest* request,
                      streambp::v1::SubmitJobResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context, const streambp::v1::GetJobRequest* request,
                   streambp::v1::Job* response) override;
  grpc::Status List(grpc::ServerContext* context, const streambp::v1::ListJobsRequest* request,
                    streambp::v1::ListJobsResponse* response) override;
  grpc::Status Cancel(grpc::ServerContext* context, const streambp::v1::CancelJobRequest* request,
                      streambp::v1::Job* response) override;
  grpc::ServerWriteReactor<streambp::v1::JobUpdate>* Watch(
      grpc::CallbackServerContext* context, const streambp::v1::WatchJobRequest* request) override;
  grpc::Status Events(grpc::ServerContext* context, const streambp::v1::JobEventsRequest* request,
                      streambp::v1::JobEventsResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context,
                           const streambp::v1::ListWorkersRequest* request,
                           streambp::v1::ListWorkersResponse* response) override;
  grpc::Status WhoAmI(grpc::ServerContext* context, const streambp::v1::WhoAmIRequest* request,
                      streambp::v1::WhoAmIResponse* response) override;
  // A job's metrics and log lines: callback streams (job_output_stream.cc).
  grpc::ServerWriteReactor<streambp::v1::JobOutputChunk>* Metrics(
      grpc::CallbackServerContext* context, const streambp::v1::JobOutputRequest* request) override;
  grpc::ServerWriteReactor<streambp::v1::JobOutputChunk>* Logs(
      grpc::CallbackServerContext* context, const streambp::v1::JobOutputRequest* request) override;

  class WatchFanout;  // moves Watch streams along (job_service.cc)

 private:
  JobManager* manager_;
  WatchHub* hub_;
  const RpcGuard* guard_;
  std::unique_ptr<WatchFanout> fanout_;
  std::unique_ptr<OutputStreams> output_streams_;
};

}  // namespace sbp::server
