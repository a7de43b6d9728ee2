// streambp.v1.RendezvousService: Set/Get/Wait on keys of a live attempt's
// scope ("<job>/<attempt>"), held in memory. Needs the worker token.
#pragma once

#include "server/job_manager.h"
#include "server/rendezvous.h"
#include "server/rpc_guard.h"
#include "streambp/v1/workers.grpc.pb.h"

namespace sbp::server {

class RendezvousServiceImpl final : public streambp::v1::RendezvousService::Service {
 public:
  // The longest Wait; clients wanting longer call again.
  static constexpr int kMaxWaitMs = 60000;

  RendezvousServiceImpl(JobManager* manager, RendezvousStore* store, const RpcGuard* guard)
      : manager_(manager), store_(store), guard_(guard) {}

  grpc::Status Set(grpc::ServerContext* context, const streambp::v1::SetKeyRequest* request,
                   streambp::v1::SetKeyResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context, const streambp::v1::GetKeyRequest* request,
                   streambp::v1::GetKeyResponse* response) override;
  grpc::Status Wait(grpc::ServerContext* context, const streambp::v1::WaitKeysRequest* request,
                    streambp::v1::WaitKeysResponse* response) override;

 private:
  JobManager* manager_;
  RendezvousStore* store_;
  const RpcGuard* guard_;
};

}  // namespace sbp::server
