// Worker identities over real gRPC: a worker id is bound to the identity
// that first registered it (another identity cannot take it over or call
// for it), and rendezvous keys are open only to the ranks of the attempt.
#include <gtest/gtest.h>

#include <fstream>

#include "server/identity.h"
#include "tests/server/coordinator_fixture.h"

namespace sbp::server::testing {
namespace {

using ::grpc::StatusCode;

class WorkerIdentityTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    dir_ = FreshDir("worker_identity").string();
    std::ofstream(dir_ + "/users.yaml")
        << "users:\n  - name: ops\n    role: admin\n    token_sha256: [" << TokenSha256("ops")
        << "]\nworkers:\n  - name: pool-a\n    token_sha256: [" << TokenSha256("a")
        << "]\n  - name: pool-b\n    token_sha256: [" << TokenSha256("b") << "]\n";
    CoordinatorOptions options;
    options.users_path = dir_ + "/users.yaml";
    Start(options);
    client_->set_token("ops");
    pool_a_ = std::make_unique<Client>(coordinator_->address(), "a");
    pool_b_ = std::make_unique<Client>(coordinator_->address(), "b");
  }
  grpc::Status SetKey(Client& as, const std::string& scope, const std::string& worker_id) {
    v1::SetKeyRequest request;
    request.set_scope(scope);
    request.set_key("k");
    request.set_value("v");
    request.set_worker_id(worker_id);
    v1::SetKeyResponse response;
    return as.rendezvous().Set(as.Context().get(), request, &response);
  }
  std::unique_ptr<Client> pool_a_, pool_b_;
};

TEST_F(WorkerIdentityTest, AWorkerIdBelongsToItsIdentity) {
  const std::string a = pool_a_->MustRegister("host-a");
  v1::RegisterWorkerResponse taken;
  const grpc::Status stolen = pool_b_->Register("host-a", int64_t{16} << 30, &taken, a);
  EXPECT_EQ(stolen.error_code(), StatusCode::PERMISSION_DENIED) << stolen.error_message();
  v1::HeartbeatResponse beat;
  EXPECT_EQ(pool_b_->Heartbeat(a, &beat).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(pool_a_->Heartbeat(a, &beat).ok());
  EXPECT_TRUE(beat.registered());
  // The owner itself re-registers as before.
  EXPECT_TRUE(pool_a_->Register("host-a", int64_t{16} << 30, &taken, a).ok());
  // A client token is not a worker's.
  EXPECT_EQ(client_->Heartbeat(a, &beat).error_code(), StatusCode::PERMISSION_DENIED);
}

TEST_F(WorkerIdentityTest, OnlyTheAttemptsRanksUseItsRendezvous) {
  const std::string job = MustSubmit(Spec("gang"));
  const std::string a = pool_a_->MustRegister("host-a");
  const std::string b = pool_b_->MustRegister("host-b");
  v1::Assignment assignment;
  std::string rank_worker;
  v1::GetAssignmentResponse polled;
  ASSERT_TRUE(pool_a_->GetAssignment(a, 2, &polled).ok());
  if (polled.has_assignment()) {
    assignment = polled.assignment();
    rank_worker = a;
  } else {
    assignment = pool_b_->MustGetAssignment(b);
    rank_worker = b;
  }
  ASSERT_EQ(assignment.job_id(), job);
  Client& owner = rank_worker == a ? *pool_a_ : *pool_b_;
  Client& other = rank_worker == a ? *pool_b_ : *pool_a_;
  const std::string outsider = rank_worker == a ? b : a;
  const std::string scope = assignment.rendezvous_scope();
  EXPECT_TRUE(SetKey(owner, scope, rank_worker).ok());
  EXPECT_EQ(SetKey(other, scope, outsider).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(SetKey(other, scope, rank_worker).error_code(), StatusCode::PERMISSION_DENIED)
      << "another identity naming the rank's worker id";
  EXPECT_EQ(SetKey(owner, scope, "").error_code(), StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace sbp::server::testing
