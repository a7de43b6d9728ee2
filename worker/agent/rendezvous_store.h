// Gloo's rendezvous Store over the coordinator's RendezvousService: keys are
// scoped to the attempt ("<job>/<attempt>"), so ranks of different attempts
// never see each other's addresses. Gloo's Store interface has no error
// channel, so failures are thrown as gloo::IoException with the RPC's message
// (GlooCommunicator::Connect turns them back into a status).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gloo/rendezvous/store.h"
#include "streambp/v1/workers.grpc.pb.h"

namespace sbp {

class CoordinatorRendezvousStore final : public gloo::rendezvous::Store {
 public:
  // `worker_id` names this worker in every call (the coordinator lets only
  // the ranks of the scope's attempt use it).
  CoordinatorRendezvousStore(std::shared_ptr<streambp::v1::RendezvousService::StubInterface> stub,
                             std::string token, std::string scope,
                             std::chrono::milliseconds timeout, std::string worker_id = "");

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<streambp::v1::RendezvousService::StubInterface> stub_;
  std::string token_;
  std::string scope_;
  std::string worker_id_;
  std::chrono::milliseconds timeout_;
};

}  // namespace sbp
