// Bad input over the wire: each case gets its exact status code and a
// message naming the field, and nothing stored changes. Tokens: missing or
// wrong is UNAUTHENTICATED, the other role's token PERMISSION_DENIED.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "absl/synchronization/notification.h"
#include "tests/server/coordinator_fixture.h"

namespace sbp::server::testing {
namespace {

using ::grpc::StatusCode;

class ValidationTest : public CoordinatorTest {
 protected:
  // Submits `spec` and expects INVALID_ARGUMENT with exactly `message`.
  void ExpectRejected(const std::string& spec, const std::string& message) {
    v1::SubmitJobResponse response;
    grpc::Status status = client_->Submit(spec, &response, "req");
    EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_EQ(status.error_message(), message);
  }

  void ExpectNothingStored() {
    v1::ListJobsResponse list;
    ASSERT_TRUE(client_->List(v1::ListJobsRequest(), &list).ok());
    EXPECT_EQ(list.jobs_size(), 0);
    v1::ListWorkersResponse workers;
    ASSERT_TRUE(client_->ListWorkers(&workers).ok());
    EXPECT_EQ(workers.workers_size(), 0);
  }
};

constexpr char kHead[] =
    "name: bad\nmodel: examples/models/tiny-qwen3\ndata: examples/data/tiny-sft.jsonl\n"
    "objective: sft\nseq_len: 64\n";

TEST_F(ValidationTest, BadSpecsNameTheField) {
  Start();
  ExpectRejected("", "spec_yaml: is required (the job spec as YAML)");
  ExpectRejected("name: [unclosed\n",
                 "spec: line 2, column 1: invalid YAML: end of sequence flow not found");
  ExpectRejected(std::string(kHead) + "train: {steps: many}\n",
                 "spec: train.steps: must be an integer (got 'many')");
  ExpectRejected(std::string(kHead) + "train: {steps: -5}\n",
                 "spec: train.steps: must be a positive integer (got -5)");
  ExpectRejected(std::string(kHead) + "trian: {steps: 5}\n",
                 "spec: unknown key 'trian' (did you mean 'train'?)");
  ExpectRejected(std::string(kHead) + "train: {stepz: 5}\n",
                 "spec: train: unknown key 'stepz' (did you mean 'steps'?)");
  ExpectRejected("name: bad\ndata: d.jsonl\nobjective: sft\nseq_len: 64\n",
                 "spec: missing required field 'model'");
  ExpectRejected(std::string(kHead) + "seq_len: 64\n", "spec: duplicate key 'seq_len'");
  ExpectRejected(std::string(kHead) + "resources: {world_size: 2000}\n",
                 "spec: train.sequences_per_step: must be at least resources.world_size "
                 "(2000) so that every worker gets an example (got 8)");
  // The spec allows 65536 ranks; a coordinator schedules at most 1024.
  ExpectRejected(
      std::string(kHead) + "resources: {world_size: 2000}\ntrain: {sequences_per_step: 2000}\n",
      "spec: resources.world_size: must be at most 1024 (got 2000)");
  ExpectRejected(std::string(kHead) + "resources: {world_size: 100000}\n",
                 "spec: resources.world_size: must be at most 65536 (got 100000)");
  ExpectRejected(std::string(kHead) + "resources: {world_size: 99999999999999999999}\n",
                 "spec: resources.world_size: must be at most 65536 (got 99999999999999999999)");
  ExpectRejected(std::string(kHead) + "resources: {world_size: 2, memory: lots}\n",
                 "spec: resources.memory: must be a positive byte size such as 8GiB or 512MiB "
                 "(got 'lots')");
  ExpectRejected(std::string(kHead) + "max_restarts: 5000\n",
                 "spec: max_restarts: must be at most 1000 (got 5000)");
  ExpectRejected(std::string(kHead) + "priority: 99999999\n",
                 "spec: priority: must be between -1000000 and 1000000 (got 99999999)");
  v1::SubmitJobResponse response;
  grpc::Status status = client_->Submit(Spec("ok"), &response, std::string(300, 'r'));
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "request_id: must be at most 200 characters");
  ExpectNothingStored();
}

TEST_F(ValidationTest, MissingFieldsAndUnknownIds) {
  Start();
  v1::Job job;
  grpc::Status status = client_->Get("", &job);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "id: is required");
  status = client_->Get("ghost", &job);
  EXPECT_EQ(status.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "no job with id \"ghost\"");
  EXPECT_EQ(client_->Cancel("", &job).error_code(), StatusCode::INVALID_ARGUMENT);
  v1::JobEventsResponse events;
  EXPECT_EQ(client_->Events("ghost", &events).error_code(), StatusCode::NOT_FOUND);
  status = client_->Events("", &events);
  EXPECT_EQ(status.error_message(), "id: is required");
  v1::ListJobsRequest list;
  list.add_states(v1::JOB_STATE_UNSPECIFIED);
  v1::ListJobsResponse listed;
  status = client_->List(list, &listed);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "states: 0 is not a job state to filter by");

  // Workers.
  v1::RegisterWorkerRequest reg;
  reg.set_memory_bytes(1 << 30);
  v1::RegisterWorkerResponse registered;
  status = worker_->workers().Register(worker_->Context().get(), reg, &registered);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "device: must be DEVICE_KIND_CPU or DEVICE_KIND_CUDA");
  reg.set_device(v1::DEVICE_KIND_CPU);
  reg.set_memory_bytes(0);
  status = worker_->workers().Register(worker_->Context().get(), reg, &registered);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "memory_bytes: must be a positive number of bytes (got 0)");
  reg.set_memory_bytes(1 << 30);
  reg.set_worker_id("../etc");
  status = worker_->workers().Register(worker_->Context().get(), reg, &registered);
  EXPECT_EQ(status.error_message(), "worker_id: must be an id returned by an earlier Register");
  // What every user's `sbp workers` shows: printable and bounded.
  reg.clear_worker_id();
  reg.set_name("evil\x1b]0;pwned\x07");
  status = worker_->workers().Register(worker_->Context().get(), reg, &registered);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "name: must be printable ASCII (no control characters)");
  reg.set_name("fine");
  reg.set_version(std::string(3 << 20, 'v'));
  status = worker_->workers().Register(worker_->Context().get(), reg, &registered);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "version: must be at most 128 characters of printable ASCII (got 3145728 bytes)");
  reg.clear_version();

  v1::HeartbeatResponse beat;
  ASSERT_TRUE(worker_->Heartbeat("ghost", &beat).ok());
  EXPECT_FALSE(beat.registered());
  status = worker_->Heartbeat("", &beat);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "worker_id: is required");
  v1::GetAssignmentResponse assignment;
  status = worker_->GetAssignment("ghost", 0, &assignment);
  EXPECT_EQ(status.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(),
            "worker ghost is not registered (its lease expired or the coordinator lost it); "
            "register again");
  status = worker_->GetAssignment("", 0, &assignment);
  EXPECT_EQ(status.error_message(), "worker_id: is required");

  v1::Assignment a;
  a.set_job_id("ghost-job");
  a.set_attempt(1);
  v1::ReportProgressResponse r;
  EXPECT_EQ(worker_->Report("ghost", a, 1, &r).error_code(), StatusCode::NOT_FOUND);
  const std::string w = worker_->MustRegister("real");
  status = worker_->Report(w, a, 1, &r);
  EXPECT_EQ(status.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "no job with id \"ghost-job\"");
  a.set_job_id("");
  status = worker_->Report(w, a, 1, &r);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "job_id: is required");
  a.set_job_id("ghost-job");
  a.set_attempt(0);
  status = worker_->Report(w, a, 1, &r);
  EXPECT_EQ(status.error_message(), "attempt: must be at least 1 (got 0)");
  a.set_attempt(1);
  a.set_rank(-1);
  status = worker_->Report(w, a, 1, &r);
  EXPECT_EQ(status.error_message(), "rank: must not be negative (got -1)");
  a.set_rank(0);
  status = worker_->Finish(w, a, v1::OUTCOME_UNSPECIFIED);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "outcome: must be OUTCOME_SUCCEEDED, OUTCOME_FAILED, OUTCOME_CANCELLED or "
            "OUTCOME_PREEMPTED");

  v1::ListJobsResponse none;
  ASSERT_TRUE(client_->List(v1::ListJobsRequest(), &none).ok());
  EXPECT_EQ(none.jobs_size(), 0);
}

class AuthTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.client_token = "client-secret";
    options.worker_token = "worker-secret";
    Start(options);
  }
};

TEST_F(AuthTest, TokensAreCheckedPerRole) {
  Client anonymous(coordinator_->address());
  Client wrong(coordinator_->address(), "guess");
  v1::Job job;
  grpc::Status status = anonymous.Get("x", &job);
  EXPECT_EQ(status.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(status.error_message(), "missing bearer token");
  status = wrong.Get("x", &job);
  EXPECT_EQ(status.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(status.error_message(), "invalid token");
  v1::SubmitJobResponse submitted;
  status = worker_->Submit(Spec("x"), &submitted);
  EXPECT_EQ(status.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(status.error_message(), "worker token cannot call streambp.v1.JobService/Submit");
  v1::RegisterWorkerResponse registered;
  status = client_->Register("w", 1 << 30, &registered);
  EXPECT_EQ(status.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(status.error_message(), "client token cannot call streambp.v1.WorkerService/Register");
  status = anonymous.Register("w", 1 << 30, &registered);
  EXPECT_EQ(status.error_code(), StatusCode::UNAUTHENTICATED);
  v1::GetKeyRequest get;
  get.set_scope("a/1");
  get.set_key("k");
  v1::GetKeyResponse got;
  status = client_->rendezvous().Get(client_->Context().get(), get, &got);
  EXPECT_EQ(status.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(status.error_message(), "client token cannot call streambp.v1.RendezvousService/Get");
  // Nothing was stored by the refused calls.
  v1::ListJobsResponse list;
  ASSERT_TRUE(client_->List(v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(client_->ListWorkers(&workers).ok());
  EXPECT_EQ(workers.workers_size(), 0);
  // The right tokens work.
  EXPECT_TRUE(client_->Submit(Spec("ok"), &submitted).ok());
  EXPECT_FALSE(worker_->MustRegister("w").empty());
}

// grpc.health.v1.Health/Check needs no token: an empty request, and a
// response whose field 1 is SERVING (1).
TEST_F(AuthTest, HealthNeedsNoToken) {
  auto channel = grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = s;
                   done.Notify();
                 });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

// Server reflection lists our services, without a token.
TEST_F(AuthTest, ReflectionListsServices) {
  auto channel = grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag = nullptr;
  bool ok = false;
  auto next = [&](intptr_t want) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(next(1));
  // ServerReflectionRequest { list_services: "*" } is field 7, a string.
  grpc::Slice request_slice(std::string("\x3a\x01*", 3));
  grpc::ByteBuffer request(&request_slice, 1);
  call->Write(request, reinterpret_cast<void*>(2));
  ASSERT_TRUE(next(2));
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  ASSERT_TRUE(next(3));
  call->WritesDone(reinterpret_cast<void*>(4));
  next(4);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  next(5);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  for (const char* service : {"streambp.v1.JobService", "streambp.v1.WorkerService",
                              "streambp.v1.RendezvousService", "grpc.health.v1.Health"}) {
    EXPECT_NE(bytes.find(service), std::string::npos) << service;
  }
}

// TLS: a certificate made with openssl for 127.0.0.1; a TLS client works, a
// plaintext one does not.
TEST_F(ValidationTest, ServesTls) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl";
  const auto dir = FreshDir("tls");
  const std::string cert = (dir / "cert.pem").string(), key = (dir / "key.pem").string();
  const std::string command =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
      "subjectAltName=IP:127.0.0.1,DNS:localhost -keyout '" +
      key + "' -out '" + cert + "' >/dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0);
  CoordinatorOptions options;
  options.tls_cert_path = cert;
  options.tls_key_path = key;
  Start(options);
  std::ifstream in(cert);
  std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem;
  auto channel = grpc::CreateChannel(coordinator_->address(), grpc::SslCredentials(ssl));
  auto stub = v1::JobService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::ListJobsResponse list;
  grpc::Status status = stub->List(&context, v1::ListJobsRequest(), &list);
  EXPECT_TRUE(status.ok()) << status.error_message();
  v1::ListJobsResponse plain;
  auto context2 = client_->Context(absl::Seconds(3));
  EXPECT_FALSE(client_->jobs().List(context2.get(), v1::ListJobsRequest(), &plain).ok());

  CoordinatorOptions half;
  half.tls_cert_path = cert;
  half.db_path = (dir / "x.db").string();
  auto refused = Coordinator::Start(half);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "tls: give both the certificate and the key, or neither");
}

}  // namespace
}  // namespace sbp::server::testing
