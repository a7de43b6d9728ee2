// The coordinator's resource limits through its real gRPC services: specs
// only on request in List, streams capped per client and for reflection,
// JobService calls and long polls in their lanes while heartbeats go on,
// reflection served as callback streams (v1alpha and v1), and the limit
// settings checked at start.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "tests/server/coordinator_fixture.h"

namespace sbp::server::testing {
namespace {

using ::testing::HasSubstr;
using StatusCode = grpc::StatusCode;

class LimitsTest : public CoordinatorTest {
 protected:
  // Opens a Watch of `id` and reads its snapshot; nullptr (with `status`
  // set) when the stream was refused.
  struct OpenWatch {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReader<v1::JobUpdate>> reader;
    v1::JobUpdate first;
  };
  std::unique_ptr<OpenWatch> Watch(const std::string& id, grpc::Status* status) {
    auto watch = std::make_unique<OpenWatch>();
    watch->context = client_->Context(absl::Seconds(30));
    v1::WatchJobRequest request;
    request.set_id(id);
    watch->reader = client_->jobs().Watch(watch->context.get(), request);
    if (watch->reader->Read(&watch->first)) return watch;
    *status = watch->reader->Finish();
    return nullptr;
  }
};

TEST_F(LimitsTest, ListCarriesSpecsOnlyWhenAsked) {
  Start();
  for (int i = 0; i < 60; ++i) MustSubmit(Spec(absl::StrCat("job", i)));
  v1::ListJobsRequest request;
  request.set_page_size(1000);
  v1::ListJobsResponse bare;
  ASSERT_TRUE(client_->List(request, &bare).ok());
  ASSERT_EQ(bare.jobs_size(), 60);
  for (const v1::Job& job : bare.jobs()) {
    EXPECT_EQ(job.spec_yaml(), "") << job.id();
    EXPECT_FALSE(job.name().empty());
  }
  EXPECT_EQ(bare.next_page_token(), "");

  // With specs: at most 50 a page, the rest on the next.
  request.set_with_spec(true);
  v1::ListJobsResponse full;
  ASSERT_TRUE(client_->List(request, &full).ok());
  ASSERT_EQ(full.jobs_size(), 50);
  EXPECT_EQ(full.jobs(0).spec_yaml(), Spec("job59"));
  ASSERT_NE(full.next_page_token(), "");
  request.set_page_token(full.next_page_token());
  v1::ListJobsResponse rest;
  ASSERT_TRUE(client_->List(request, &rest).ok());
  ASSERT_EQ(rest.jobs_size(), 10);
  EXPECT_EQ(rest.jobs(9).spec_yaml(), Spec("job0"));
  // Get still has the spec.
  EXPECT_EQ(client_->MustGet(bare.jobs(0).id()).spec_yaml(), Spec("job59"));
}

// The snapshot carries the spec; updates after it (the spec never changes)
// do not.
TEST_F(LimitsTest, WatchSendsTheSpecOnce) {
  Start();
  const std::string id = MustSubmit(Spec("watched"));
  grpc::Status status;
  std::unique_ptr<OpenWatch> watch = Watch(id, &status);
  ASSERT_NE(watch, nullptr) << status.error_message();
  EXPECT_EQ(watch->first.job().spec_yaml(), Spec("watched"));
  v1::Job cancelled;
  ASSERT_TRUE(client_->Cancel(id, &cancelled).ok());
  v1::JobUpdate update;
  ASSERT_TRUE(watch->reader->Read(&update));
  EXPECT_EQ(update.job().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(update.job().spec_yaml(), "");
  EXPECT_FALSE(watch->reader->Read(&update));
  EXPECT_TRUE(watch->reader->Finish().ok());
}

TEST_F(LimitsTest, WatchesPerClientAreCappedAndSlotsComeBack) {
  CoordinatorOptions options;
  options.limits.max_streams_per_client = 3;
  Start(options);
  const std::string id = MustSubmit(Spec("popular"));
  std::vector<std::unique_ptr<OpenWatch>> open;
  grpc::Status status;
  for (int i = 0; i < 3; ++i) {
    open.push_back(Watch(id, &status));
    ASSERT_NE(open.back(), nullptr) << status.error_message();
  }
  EXPECT_EQ(Watch(id, &status), nullptr);
  EXPECT_EQ(status.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(status.error_message(),
            "identity anonymous already has 3 open streams (--max-streams-per-client, per "
            "identity or, without a token, per address); close some watches or retry later");
  // A closed watch gives its slot back.
  open[0]->context->TryCancel();
  open[0]->reader->Finish();
  open.erase(open.begin());
  EXPECT_TRUE(WaitFor([&] {
    std::unique_ptr<OpenWatch> again = Watch(id, &status);
    if (again == nullptr) return false;
    open.push_back(std::move(again));
    return true;
  }));
  // Unary calls are not streams: they still work.
  EXPECT_EQ(client_->MustGet(id).id(), id);
}

// Reflection, without a token: list_services and a descriptor lookup on both
// protocol versions; its streams have their own cap and count as streams.
TEST_F(LimitsTest, ReflectionIsServedAndCapped) {
  CoordinatorOptions options;
  options.client_token = "c";
  options.limits.max_reflection_streams = 2;
  Start(options);
  auto channel = grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials());

  auto alpha = grpc::reflection::v1alpha::ServerReflection::NewStub(channel);
  grpc::ClientContext alpha_context;
  auto alpha_stream = alpha->ServerReflectionInfo(&alpha_context);
  grpc::reflection::v1alpha::ServerReflectionRequest alpha_request;
  alpha_request.set_list_services("*");
  ASSERT_TRUE(alpha_stream->Write(alpha_request));
  grpc::reflection::v1alpha::ServerReflectionResponse alpha_response;
  ASSERT_TRUE(alpha_stream->Read(&alpha_response));
  std::vector<std::string> names;
  for (const auto& service : alpha_response.list_services_response().service()) {
    names.push_back(service.name());
  }
  EXPECT_THAT(names,
              ::testing::IsSupersetOf({"streambp.v1.JobService", "streambp.v1.WorkerService",
                                       "streambp.v1.RendezvousService", "grpc.health.v1.Health",
                                       "grpc.reflection.v1alpha.ServerReflection",
                                       "grpc.reflection.v1.ServerReflection"}));

  auto stable = grpc::reflection::v1::ServerReflection::NewStub(channel);
  grpc::ClientContext stable_context;
  auto stable_stream = stable->ServerReflectionInfo(&stable_context);
  grpc::reflection::v1::ServerReflectionRequest stable_request;
  stable_request.set_file_containing_symbol("streambp.v1.JobService");
  ASSERT_TRUE(stable_stream->Write(stable_request));
  grpc::reflection::v1::ServerReflectionResponse stable_response;
  ASSERT_TRUE(stable_stream->Read(&stable_response));
  ASSERT_GE(stable_response.file_descriptor_response().file_descriptor_proto_size(), 1);
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(
      file.ParseFromString(stable_response.file_descriptor_response().file_descriptor_proto(0)));
  EXPECT_EQ(file.name(), "streambp/v1/jobs.proto");
  stable_request.set_file_containing_symbol("no.such.Symbol");
  ASSERT_TRUE(stable_stream->Write(stable_request));
  ASSERT_TRUE(stable_stream->Read(&stable_response));
  EXPECT_EQ(stable_response.error_response().error_code(), StatusCode::NOT_FOUND);

  // Two are open: a third is refused at once.
  grpc::ClientContext third_context;
  third_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  auto third = alpha->ServerReflectionInfo(&third_context);
  third->Write(alpha_request);
  EXPECT_FALSE(third->Read(&alpha_response));
  grpc::Status refused = third->Finish();
  EXPECT_EQ(refused.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("--max-reflection-streams"));

  ASSERT_TRUE(alpha_stream->WritesDone());
  EXPECT_TRUE(alpha_stream->Finish().ok());
  ASSERT_TRUE(stable_stream->WritesDone());
  EXPECT_TRUE(stable_stream->Finish().ok());
}

// Workers' long polls have a lane of their own: beyond it a poll is refused
// at once, and heartbeats, which have no lane limit, go on.
TEST_F(LimitsTest, LongPollsAreCappedAndHeartbeatsGoOn) {
  CoordinatorOptions options;
  options.limits.max_threads = 32;
  options.limits.max_long_polls = 2;
  Start(options);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(worker_->MustRegister(absl::StrCat("w", i)));
  std::atomic<int> waiting_done{0};
  std::vector<std::thread> polls;
  for (int i = 0; i < 2; ++i) {
    polls.emplace_back([&, i] {
      v1::GetAssignmentResponse response;
      EXPECT_TRUE(worker_->GetAssignment(ids[i], 3, &response).ok());
      waiting_done++;
    });
  }
  absl::SleepFor(absl::Seconds(1));  // both are waiting now
  v1::GetAssignmentResponse response;
  const absl::Time start = absl::Now();
  grpc::Status refused = worker_->GetAssignment(ids[2], 3, &response);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(refused.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(refused.error_message(),
            "streambp.v1.WorkerService/GetAssignment: the coordinator already holds 2 waiting "
            "worker calls (--max-threads sets the limit); retry shortly");
  for (const std::string& id : ids) {
    v1::HeartbeatResponse heartbeat;
    grpc::Status status = worker_->Heartbeat(id, &heartbeat);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(heartbeat.registered());
  }
  EXPECT_EQ(waiting_done.load(), 0);
  for (std::thread& t : polls) t.join();
  // The lane is free again.
  EXPECT_TRUE(worker_->GetAssignment(ids[2], 0, &response).ok());
}

TEST_F(LimitsTest, LimitsAreCheckedAtStart) {
  dir_ = FreshDir("limits_checked").string();
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.db_path = dir_ + "/c.db";
  options.limits.max_threads = 16;
  auto refused = Coordinator::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(), "max_threads: must be at least 32 (got 16)");

  options.limits.max_threads = 64;
  options.limits.max_client_calls = 30;
  options.limits.max_long_polls = 30;
  refused = Coordinator::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "max_client_calls + max_long_polls: 30 + 30 leave fewer than 8 of max_threads 64 "
            "for worker heartbeats; raise max_threads or lower them");

  options.limits = RpcLimits();
  options.max_streams_per_connection = 0;
  refused = Coordinator::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "max_streams_per_connection: must be at least 1 (got 0)");
}

// A second coordinator on the same database is refused; the first one keeps
// serving.
TEST_F(LimitsTest, SecondCoordinatorOnTheSameDatabaseIsRefused) {
  Start();
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.db_path = dir_ + "/coordinator.db";
  auto second = Coordinator::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(second.status().message()),
      HasSubstr("the database " + options.db_path + " is in use by another sbp-coordinator"));
  EXPECT_FALSE(MustSubmit(Spec("still-serving")).empty());
}

}  // namespace
}  // namespace sbp::server::testing
