// Shared helpers for the coordinator tests: scratch directories, job specs,
// and a client for the three services over a real gRPC channel.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "streambp/v1/jobs.grpc.pb.h"
#include "streambp/v1/workers.grpc.pb.h"

namespace sbp::server::testing {

namespace v1 = streambp::v1;

inline std::filesystem::path FreshDir(const std::string& name) {
  auto dir = std::filesystem::path(::testing::TempDir()) / ("sbp_server_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A valid spec; `extra` is appended as more top-level YAML.
inline std::string Spec(const std::string& name, int world_size = 1,
                        const std::string& extra = "") {
  return absl::StrCat("name: ", name,
                      "\nmodel: examples/models/tiny-qwen3\ndata: examples/data/tiny-sft.jsonl\n"
                      "objective: sft\nseq_len: 64\n"
                      "train: {steps: 10, sequences_per_step: 8}\n"
                      "resources: {world_size: ",
                      world_size, ", device: cpu}\n", extra);
}

// Calls the coordinator as a client or worker would, with an optional token.
class Client {
 public:
  explicit Client(const std::string& address, std::string token = "")
      : channel_(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())),
        jobs_(v1::JobService::NewStub(channel_)),
        workers_(v1::WorkerService::NewStub(channel_)),
        rendezvous_(v1::RendezvousService::NewStub(channel_)),
        token_(std::move(token)) {}

  void set_token(std::string token) { token_ = std::move(token); }

  // A context with the token and a deadline.
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout = absl::Seconds(10)) const {
    auto context = std::make_unique<grpc::ClientContext>();
    if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return context;
  }

  grpc::Status Submit(const std::string& spec, v1::SubmitJobResponse* out,
                      const std::string& request_id = "") {
    v1::SubmitJobRequest request;
    request.set_spec_yaml(spec);
    request.set_request_id(request_id);
    return jobs_->Submit(Context().get(), request, out);
  }
  grpc::Status Get(const std::string& id, v1::Job* out) {
    v1::GetJobRequest request;
    request.set_id(id);
    return jobs_->Get(Context().get(), request, out);
  }
  v1::Job MustGet(const std::string& id) {
    v1::Job job;
    grpc::Status status = Get(id, &job);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return job;
  }
  grpc::Status Cancel(const std::string& id, v1::Job* out, const std::string& reason = "") {
    v1::CancelJobRequest request;
    request.set_id(id);
    request.set_reason(reason);
    return jobs_->Cancel(Context().get(), request, out);
  }
  grpc::Status Events(const std::string& id, v1::JobEventsResponse* out, int64_t after = 0) {
    v1::JobEventsRequest request;
    request.set_id(id);
    request.set_after_sequence(after);
    return jobs_->Events(Context().get(), request, out);
  }
  grpc::Status List(const v1::ListJobsRequest& request, v1::ListJobsResponse* out) {
    return jobs_->List(Context().get(), request, out);
  }
  grpc::Status ListWorkers(v1::ListWorkersResponse* out) {
    return jobs_->ListWorkers(Context().get(), v1::ListWorkersRequest(), out);
  }

  grpc::Status Register(const std::string& name, int64_t memory, v1::RegisterWorkerResponse* out,
                        const std::string& worker_id = "", int64_t host_memory = 0,
                        int64_t offload_disk = 0) {
    v1::RegisterWorkerRequest request;
    request.set_name(name);
    request.set_device(v1::DEVICE_KIND_CPU);
    request.set_memory_bytes(memory);
    request.set_host_memory_bytes(host_memory);
    request.set_offload_disk_bytes(offload_disk);
    request.set_version("test");
    request.set_worker_id(worker_id);
    return workers_->Register(Context().get(), request, out);
  }
  // A worker that offers the memory tiers `host_memory` and `offload_disk`.
  std::string MustRegisterTiers(const std::string& name, int64_t memory, int64_t host_memory,
                                int64_t offload_disk = 0) {
    v1::RegisterWorkerResponse response;
    grpc::Status status = Register(name, memory, &response, "", host_memory, offload_disk);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.worker_id();
  }
  std::string MustRegister(const std::string& name, int64_t memory = int64_t{16} << 30) {
    v1::RegisterWorkerResponse response;
    grpc::Status status = Register(name, memory, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.worker_id();
  }
  grpc::Status Heartbeat(const std::string& worker_id, v1::HeartbeatResponse* out) {
    v1::HeartbeatRequest request;
    request.set_worker_id(worker_id);
    return workers_->Heartbeat(Context().get(), request, out);
  }
  grpc::Status GetAssignment(const std::string& worker_id, int wait_seconds,
                             v1::GetAssignmentResponse* out) {
    v1::GetAssignmentRequest request;
    request.set_worker_id(worker_id);
    request.set_wait_seconds(wait_seconds);
    return workers_->GetAssignment(Context(absl::Seconds(wait_seconds + 10)).get(), request, out);
  }
  v1::Assignment MustGetAssignment(const std::string& worker_id, int wait_seconds = 5) {
    v1::GetAssignmentResponse response;
    grpc::Status status = GetAssignment(worker_id, wait_seconds, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(response.has_assignment()) << "no assignment for " << worker_id;
    return response.assignment();
  }
  grpc::Status Report(const std::string& worker_id, const v1::Assignment& a, int64_t step,
                      v1::ReportProgressResponse* out, const std::string& checkpoint = "",
                      const std::string& message = "") {
    v1::ReportProgressRequest request;
    request.set_worker_id(worker_id);
    request.set_job_id(a.job_id());
    request.set_attempt(a.attempt());
    request.set_rank(a.rank());
    request.mutable_progress()->set_step(step);
    request.mutable_progress()->set_total_steps(10);
    request.mutable_progress()->set_loss(2.5);
    request.mutable_progress()->set_tokens_per_second(1000);
    request.mutable_progress()->set_peak_bytes(1 << 20);
    request.set_checkpoint(checkpoint);
    request.set_message(message);
    return workers_->ReportProgress(Context().get(), request, out);
  }
  grpc::Status Finish(const std::string& worker_id, const v1::Assignment& a, v1::Outcome outcome,
                      v1::FailureClass failure = v1::FAILURE_CLASS_UNSPECIFIED,
                      const std::string& message = "") {
    v1::FinishRequest request;
    request.set_worker_id(worker_id);
    request.set_job_id(a.job_id());
    request.set_attempt(a.attempt());
    request.set_rank(a.rank());
    request.set_outcome(outcome);
    request.set_failure_class(failure);
    request.set_message(message);
    v1::FinishResponse response;
    return workers_->Finish(Context().get(), request, &response);
  }

  v1::JobService::Stub& jobs() { return *jobs_; }
  v1::WorkerService::Stub& workers() { return *workers_; }
  v1::RendezvousService::Stub& rendezvous() { return *rendezvous_; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
  std::unique_ptr<v1::RendezvousService::Stub> rendezvous_;
  std::string token_;
};

// Polls `condition` every 20 ms until it holds or `timeout` passes.
template <typename Condition>
bool WaitFor(Condition condition, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return condition();
}

}  // namespace sbp::server::testing
