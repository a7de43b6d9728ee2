// streambp.v1.JobService over the gRPC sync API: validates requests,
// converts messages and delegates to the JobManager. Needs the client token.
#pragma once

#include "server/job_manager.h"
#include "server/rpc_guard.h"
#include "server/watch_hub.h"
#include "streambp/v1/jobs.grpc.pb.h"

namespace sbp::server {

class JobServiceImpl final : public streambp::v1::JobService::Service {
 public:
  JobServiceImpl(JobManager* manager, WatchHub* hub, const RpcGuard* guard)
      : manager_(manager), hub_(hub), guard_(guard) {}

  grpc::Status Submit(grpc::ServerContext* context, const streambp::v1::SubmitJobRequest* request,
                      streambp::v1::SubmitJobResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context, const streambp::v1::GetJobRequest* request,
                   streambp::v1::Job* response) override;
  grpc::Status List(grpc::ServerContext* context, const streambp::v1::ListJobsRequest* request,
                    streambp::v1::ListJobsResponse* response) override;
  grpc::Status Cancel(grpc::ServerContext* context, const streambp::v1::CancelJobRequest* request,
                      streambp::v1::Job* response) override;
  grpc::Status Watch(grpc::ServerContext* context, const streambp::v1::WatchJobRequest* request,
                     grpc::ServerWriter<streambp::v1::JobUpdate>* writer) override;
  grpc::Status Events(grpc::ServerContext* context, const streambp::v1::JobEventsRequest* request,
                      streambp::v1::JobEventsResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context,
                           const streambp::v1::ListWorkersRequest* request,
                           streambp::v1::ListWorkersResponse* response) override;

 private:
  absl::Status StreamJob(grpc::ServerContext* context, const std::string& id,
                         grpc::ServerWriter<streambp::v1::JobUpdate>* writer);

  JobManager* manager_;
  WatchHub* hub_;
  const RpcGuard* guard_;
};

}  // namespace sbp::server
