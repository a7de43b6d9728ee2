// streambp.v1.WorkerService over the gRPC sync API: validates requests,
// converts messages and delegates to the JobManager. Needs the worker token.
#pragma once

#include "server/job_manager.h"
#include "server/rpc_guard.h"
#include "streambp/v1/workers.grpc.pb.h"

namespace sbp::server {

class WorkerServiceImpl final : public streambp::v1::WorkerService::Service {
 public:
  WorkerServiceImpl(JobManager* manager, const RpcGuard* guard)
      : manager_(manager), guard_(guard) {}

  grpc::Status Register(grpc::ServerContext* context,
                        const streambp::v1::RegisterWorkerRequest* request,
                        streambp::v1::RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const streambp::v1::HeartbeatRequest* request,
                         streambp::v1::HeartbeatResponse* response) override;
  grpc::Status GetAssignment(grpc::ServerContext* context,
                             const streambp::v1::GetAssignmentRequest* request,
                             streambp::v1::GetAssignmentResponse* response) override;
  grpc::Status ReportProgress(grpc::ServerContext* context,
                              const streambp::v1::ReportProgressRequest* request,
                              streambp::v1::ReportProgressResponse* response) override;
  grpc::Status Finish(grpc::ServerContext* context, const streambp::v1::FinishRequest* request,
                      streambp::v1::FinishResponse* response) override;
  grpc::Status AppendOutput(grpc::ServerContext* context,
                            const streambp::v1::AppendOutputRequest* request,
                            streambp::v1::AppendOutputResponse* response) override;

 private:
  JobManager* manager_;
  const RpcGuard* guard_;
};

}  // namespace sbp::server
