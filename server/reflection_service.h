// gRPC server reflection (grpc.reflection.v1alpha and its stable twin
// grpc.reflection.v1) for grpcurl and similar tools, served from the
// generated descriptor pool. It needs no token.
//
// It replaces libgrpc++_reflection's plugin, whose synchronous handler holds
// a server thread for as long as a client keeps its stream open: a few
// thousand idle streams from anyone who can reach the port would take every
// thread and, with them, the workers' heartbeats. These are callback streams
// instead: an open stream holds no thread, only a reflection StreamSlot of
// the RpcGuard (capped overall and per client address).
#pragma once

#include <grpcpp/impl/service_type.h>

#include <memory>
#include <string>
#include <vector>

#include "server/rpc_guard.h"

namespace sbp::server {

class ReflectionServices {
 public:
  // `service_names`: what list_services answers ("streambp.v1.JobService",
  // ...); the reflection services add themselves.
  ReflectionServices(const RpcGuard* guard, std::vector<std::string> service_names);
  ~ReflectionServices();
  ReflectionServices(const ReflectionServices&) = delete;
  ReflectionServices& operator=(const ReflectionServices&) = delete;

  // To register with the grpc::ServerBuilder; owned here.
  std::vector<grpc::Service*> services();

 private:
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<grpc::Service>> services_;
};

}  // namespace sbp::server
