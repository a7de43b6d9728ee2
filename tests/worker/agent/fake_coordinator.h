// An in-process WorkerService for agent tests: hands out queued assignments,
// records every call, and can be told to forget workers, cancel a job after a
// given step, reject reports as stale or require a bearer token.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "streambp/v1/workers.grpc.pb.h"

namespace sbp::testing {

namespace v1 = streambp::v1;

class FakeCoordinator final : public v1::WorkerService::Service {
 public:
  // Listens on 127.0.0.1:`port` (0: a free port).
  explicit FakeCoordinator(int port = 0) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeCoordinator() override { Shutdown(); }

  void Shutdown() {
    {
      absl::MutexLock lock(&mu_);
      if (shut_down_) return;
      shut_down_ = true;
    }
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    server_->Wait();
  }

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // --- scripting ---
  void Enqueue(const v1::Assignment& assignment) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(assignment);
  }
  void RequireToken(const std::string& token) {
    absl::MutexLock lock(&mu_);
    token_ = token;
  }
  void CancelAfterStep(int64_t step) {
    absl::MutexLock lock(&mu_);
    cancel_after_step_ = step;
  }
  // Reports of attempts below this are answered ABORTED.
  void SetCurrentAttempt(int attempt) {
    absl::MutexLock lock(&mu_);
    current_attempt_ = attempt;
  }
  // The next heartbeat answers registered=false.
  void ForgetWorkers() {
    absl::MutexLock lock(&mu_);
    forget_ = true;
  }
  // Heartbeats list this attempt in stop_attempts.
  void StopAttempt(const std::string& job_id, int attempt) {
    absl::MutexLock lock(&mu_);
    stop_job_ = job_id;
    stop_attempt_ = attempt;
  }

  // --- observations ---
  std::vector<v1::RegisterWorkerRequest> registrations() const {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }
  std::vector<v1::HeartbeatRequest> heartbeats() const {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  std::vector<v1::ReportProgressRequest> reports() const {
    absl::MutexLock lock(&mu_);
    return reports_;
  }
  std::vector<v1::FinishRequest> finishes() const {
    absl::MutexLock lock(&mu_);
    return finishes_;
  }
  std::vector<std::string> authorizations() const {
    absl::MutexLock lock(&mu_);
    return authorizations_;
  }
  // Waits until `n` Finish calls arrived; false on timeout.
  bool WaitForFinishes(size_t n, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto done = [&]() { return finishes_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  bool WaitForReports(size_t n, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto done = [&]() { return reports_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  bool WaitForRegistrations(size_t n, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto done = [&]() { return registrations_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }

  // --- WorkerService ---
  grpc::Status Register(grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
                        v1::RegisterWorkerResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = CheckToken(context); !s.ok()) return s;
    registrations_.push_back(*request);
    response->set_worker_id(request->worker_id().empty() ? "w1" : request->worker_id());
    response->set_lease_seconds(3);
    response->set_heartbeat_seconds(1);
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = CheckToken(context); !s.ok()) return s;
    heartbeats_.push_back(*request);
    response->set_registered(!forget_);
    forget_ = false;
    if (!stop_job_.empty()) {
      v1::AttemptRef* ref = response->add_stop_attempts();
      ref->set_job_id(stop_job_);
      ref->set_attempt(stop_attempt_);
    }
    return grpc::Status::OK;
  }

  grpc::Status GetAssignment(grpc::ServerContext* context, const v1::GetAssignmentRequest* request,
                             v1::GetAssignmentResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = CheckToken(context); !s.ok()) return s;
    auto ready = [&]() { return !queue_.empty() || shut_down_ || context->IsCancelled(); };
    const absl::Time deadline = absl::Now() + absl::Seconds(request->wait_seconds());
    while (!ready() && absl::Now() < deadline) {
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(50));
    }
    if (!queue_.empty() && !shut_down_) {
      *response->mutable_assignment() = queue_.front();
      queue_.pop_front();
    }
    return grpc::Status::OK;
  }

  grpc::Status ReportProgress(grpc::ServerContext* context,
                              const v1::ReportProgressRequest* request,
                              v1::ReportProgressResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = CheckToken(context); !s.ok()) return s;
    reports_.push_back(*request);
    if (request->attempt() < current_attempt_) {
      return grpc::Status(grpc::StatusCode::ABORTED, "stale attempt");
    }
    response->set_cancel_requested(cancel_after_step_ > 0 &&
                                   request->progress().step() >= cancel_after_step_);
    return grpc::Status::OK;
  }

  grpc::Status Finish(grpc::ServerContext* context, const v1::FinishRequest* request,
                      v1::FinishResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = CheckToken(context); !s.ok()) return s;
    finishes_.push_back(*request);
    return grpc::Status::OK;
  }

 private:
  grpc::Status CheckToken(grpc::ServerContext* context) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto& metadata = context->client_metadata();
    const auto it = metadata.find("authorization");
    const std::string value =
        it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
    authorizations_.push_back(value);
    if (!token_.empty() && value != "Bearer " + token_) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad worker token");
    }
    return grpc::Status::OK;
  }

  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::Assignment> queue_ ABSL_GUARDED_BY(mu_);
  std::string token_ ABSL_GUARDED_BY(mu_);
  int64_t cancel_after_step_ ABSL_GUARDED_BY(mu_) = 0;
  int current_attempt_ ABSL_GUARDED_BY(mu_) = 0;
  bool forget_ ABSL_GUARDED_BY(mu_) = false;
  std::string stop_job_ ABSL_GUARDED_BY(mu_);
  int stop_attempt_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::RegisterWorkerRequest> registrations_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::HeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportProgressRequest> reports_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::FinishRequest> finishes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> authorizations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sbp::testing
