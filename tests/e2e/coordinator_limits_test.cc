// The coordinator's resource limits against real processes on loopback: a
// real sbp-coordinator and sbp-worker training a job, while this test holds
// 5,000 server reflection streams (no token needed) and 2,000 Watch streams
// open at once. The coordinator's thread count stays bounded, `sbp list`
// keeps answering, and the worker is never marked lost: its lease keeps
// renewing and the job keeps its first attempt. With the default caps the
// excess streams are refused with RESOURCE_EXHAUSTED instead. And a second
// coordinator on the same database exits 2 naming the file.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "streambp/v1/jobs.grpc.pb.h"
#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

namespace v1 = streambp::v1;
using std::chrono::seconds;

constexpr int kReflectionStreams = 5000;
constexpr int kWatchStreams = 2000;
constexpr int kStreamsPerChannel = 100;  // the coordinator's default per connection
constexpr char kReflectionMethod[] =
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

// "Threads:" of /proc/PID/status; -1 when unreadable.
int ThreadCount(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// Many streams opened with the async API on one completion queue, driven by
// the test's thread (no thread per stream here either). A reflection stream
// sends list_services and reads the answer; a watch reads its snapshot. Then
// each stays open, idle, until CloseAll. A refused stream ends with a status.
class StreamFlood {
 public:
  enum Kind { kReflection, kWatch };

  explicit StreamFlood(std::string address) : address_(std::move(address)) {}
  ~StreamFlood() { CloseAll(); }

  void Open(Kind kind, int count, const std::string& job_id = "", const std::string& token = "") {
    for (int i = 0; i < count; ++i) {
      auto s = std::make_unique<Stream>();
      s->kind = kind;
      s->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
      if (!token.empty()) s->context.AddMetadata("authorization", "Bearer " + token);
      std::shared_ptr<grpc::Channel> channel = NextChannel();
      if (kind == kReflection) {
        grpc::GenericStub stub(channel);
        s->reflection = stub.PrepareCall(&s->context, kReflectionMethod, &cq_);
        s->reflection->StartCall(s.get());
      } else {
        v1::WatchJobRequest request;
        request.set_id(job_id);
        s->watch = v1::JobService::NewStub(channel)->PrepareAsyncWatch(&s->context, request, &cq_);
        s->watch->StartCall(s.get());
      }
      ++pending_;
      streams_.push_back(std::move(s));
    }
  }

  // Handles completions until no stream is still starting, or `timeout`.
  bool Settle(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (pending_ > 0 && absl::Now() < deadline) Step(deadline);
    return pending_ == 0;
  }

  int open(Kind kind) const { return Count(kind, Phase::kOpen); }
  // Finished streams of `kind` by status code.
  std::map<grpc::StatusCode, int> finished(Kind kind) const {
    std::map<grpc::StatusCode, int> out;
    for (const auto& s : streams_) {
      if (s->kind == kind && s->phase == Phase::kDone) out[s->status.error_code()]++;
    }
    return out;
  }
  std::string first_error(Kind kind) const {
    for (const auto& s : streams_) {
      if (s->kind == kind && s->phase == Phase::kDone && !s->status.ok()) {
        return s->status.error_message();
      }
    }
    return "";
  }

  void CloseAll() {
    if (closed_) return;
    closed_ = true;
    for (auto& s : streams_) {
      s->context.TryCancel();
      if (s->phase == Phase::kOpen) Finish(*s);
    }
    Settle(absl::Seconds(30));
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

 private:
  enum class Phase { kStarting, kWriting, kReading, kOpen, kFinishing, kDone };
  struct Stream {
    Kind kind = kReflection;
    Phase phase = Phase::kStarting;
    grpc::ClientContext context;
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> reflection;
    std::unique_ptr<grpc::ClientAsyncReader<v1::JobUpdate>> watch;
    grpc::ByteBuffer request, response;
    v1::JobUpdate update;
    grpc::Status status;
  };

  std::shared_ptr<grpc::Channel> NextChannel() {
    if (channels_.empty() || on_channel_ == kStreamsPerChannel) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
      args.SetInt("sbp.test.channel", static_cast<int>(channels_.size()));
      channels_.push_back(
          grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args));
      on_channel_ = 0;
    }
    ++on_channel_;
    return channels_.back();
  }

  void Finish(Stream& s) {
    s.phase = Phase::kFinishing;
    ++pending_;
    if (s.kind == kReflection) {
      s.reflection->Finish(&s.status, &s);
    } else {
      s.watch->Finish(&s.status, &s);
    }
  }

  void Step(absl::Time deadline) {
    void* tag = nullptr;
    bool ok = false;
    if (cq_.AsyncNext(&tag, &ok, absl::ToChronoTime(deadline)) !=
        grpc::CompletionQueue::GOT_EVENT) {
      return;
    }
    Stream& s = *static_cast<Stream*>(tag);
    switch (s.phase) {
      case Phase::kStarting:
        if (!ok) {
          --pending_;
          return Finish(s);
        }
        if (s.kind == kReflection) {
          // ServerReflectionRequest { list_services: "*" }: field 7, a string.
          grpc::Slice slice(std::string("\x3a\x01*", 3));
          s.request = grpc::ByteBuffer(&slice, 1);
          s.phase = Phase::kWriting;
          s.reflection->Write(s.request, &s);
        } else {
          s.phase = Phase::kReading;
          s.watch->Read(&s.update, &s);
        }
        return;
      case Phase::kWriting:
        if (!ok) {
          --pending_;
          return Finish(s);
        }
        s.phase = Phase::kReading;
        s.reflection->Read(&s.response, &s);
        return;
      case Phase::kReading:
        --pending_;
        if (!ok) return Finish(s);
        s.phase = Phase::kOpen;
        return;
      case Phase::kFinishing:
        --pending_;
        s.phase = Phase::kDone;
        return;
      case Phase::kOpen:
      case Phase::kDone:
        return;
    }
  }

  int Count(Kind kind, Phase phase) const {
    int n = 0;
    for (const auto& s : streams_) n += s->kind == kind && s->phase == phase;
    return n;
  }

  std::string address_;
  grpc::CompletionQueue cq_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  int on_channel_ = 0;
  std::vector<std::unique_ptr<Stream>> streams_;
  int pending_ = 0;
  bool closed_ = false;
};

// A cluster with one worker training a job that runs until cancelled.
class CoordinatorLimitsTest : public ::testing::Test {
 protected:
  void StartCluster(const std::string& name, const std::vector<std::string>& coordinator_flags) {
    cluster_ = std::make_unique<Cluster>(name);
    cluster_->StartCoordinator(kLeaseSeconds, coordinator_flags);
    cluster_->StartWorker("w1");
    ASSERT_TRUE(WaitFor([&] { return WorkerState() == "idle"; }, seconds(20))) << Logs();
    job_id_ = cluster_->Submit(
        cluster_->WriteSpec("endless", cluster_->Spec("endless", 1000000, 1, 1000000)));
    ASSERT_FALSE(job_id_.empty()) << Logs();
    ASSERT_TRUE(WaitFor([&] { return cluster_->Step(job_id_) >= 1; }, seconds(30))) << Logs();
  }

  void TearDown() override {
    if (HasFailure() && cluster_ != nullptr) std::fprintf(stderr, "%s\n", Logs().c_str());
  }

  // The worker's state ("idle", "busy", "lost") and the age of its last
  // heartbeat as the coordinator saw it.
  std::string WorkerState(absl::Duration* heartbeat_age = nullptr) {
    const CommandResult r = cluster_->Sbp("workers -o json");
    const auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (r.exit_code != 0 || !j.is_object() || !j.contains("workers") || j["workers"].size() != 1) {
      return "";
    }
    const nlohmann::json& worker = j["workers"][0];
    absl::Time last;
    std::string error;
    if (heartbeat_age != nullptr &&
        absl::ParseTime(absl::RFC3339_full, worker.value("last_heartbeat", ""), &last, &error)) {
      *heartbeat_age = absl::Now() - last;
    }
    return worker.value("state", "");
  }

  struct Observed {
    absl::Duration slowest_list;
    absl::Duration oldest_heartbeat;
    int max_threads = 0;
    int64_t first_step = -1, last_step = -1;
  };

  // Watches the worker, the job and `sbp list` for `hold`: the worker must
  // never be lost nor the job retried, its heartbeats must keep coming
  // (younger than the lease), and each `sbp list` must answer within 5 s.
  Observed HoldAndCheck(absl::Duration hold) {
    Observed seen;
    const absl::Time end = absl::Now() + hold;
    while (absl::Now() < end) {
      const absl::Time start = absl::Now();
      const CommandResult list = cluster_->Sbp("list");
      const absl::Duration took = absl::Now() - start;
      EXPECT_EQ(list.exit_code, 0) << list.err;
      EXPECT_LT(took, absl::Seconds(5));
      seen.slowest_list = std::max(seen.slowest_list, took);
      absl::Duration age = absl::InfiniteDuration();
      const std::string state = WorkerState(&age);
      EXPECT_EQ(state, "busy") << "the worker was marked " << state;
      EXPECT_LT(age, absl::Seconds(kLeaseSeconds)) << "the worker's lease was not renewed";
      seen.oldest_heartbeat = std::max(seen.oldest_heartbeat, age);
      const nlohmann::json job = cluster_->GetJob(job_id_);
      EXPECT_TRUE(job.is_object());
      if (job.is_object()) {
        EXPECT_EQ(job.value("state", ""), "RUNNING");
        EXPECT_EQ(job.value("attempt", 0), 1) << "the job was retried";
        if (job.contains("progress")) {
          seen.last_step = Cluster::Int(job["progress"]["step"]);
          if (seen.first_step < 0) seen.first_step = seen.last_step;
        }
      }
      seen.max_threads = std::max(seen.max_threads, ThreadCount(cluster_->coordinator().pid()));
      absl::SleepFor(absl::Milliseconds(500));
    }
    return seen;
  }

  std::string Logs() const { return cluster_ == nullptr ? "" : cluster_->Logs(); }

  static constexpr int kLeaseSeconds = 6;
  std::unique_ptr<Cluster> cluster_;
  std::string job_id_;
};

// Caps raised above the flood: all 7,000 streams are open at once, and they
// hold no threads (they are callback streams), so the coordinator stays
// within --max-threads of where it started.
TEST_F(CoordinatorLimitsTest, SevenThousandOpenStreamsHoldNoThreadsAndLoseNoWorker) {
  StartCluster("limits_open",
               {"--max-threads", "64", "--max-streams", "8000", "--max-streams-per-client", "8000",
                "--max-reflection-streams", "6000"});
  if (HasFatalFailure()) return;
  const int baseline = ThreadCount(cluster_->coordinator().pid());
  ASSERT_GT(baseline, 0);
  StreamFlood flood(cluster_->address());
  const absl::Time start = absl::Now();
  flood.Open(StreamFlood::kReflection, kReflectionStreams);
  flood.Open(StreamFlood::kWatch, kWatchStreams, job_id_, "client-secret");
  ASSERT_TRUE(flood.Settle(absl::Seconds(40))) << Logs();
  const absl::Duration open_time = absl::Now() - start;
  EXPECT_EQ(flood.open(StreamFlood::kReflection), kReflectionStreams)
      << flood.first_error(StreamFlood::kReflection);
  EXPECT_EQ(flood.open(StreamFlood::kWatch), kWatchStreams)
      << flood.first_error(StreamFlood::kWatch);

  // Two leases with every stream open.
  const Observed seen = HoldAndCheck(absl::Seconds(2 * kLeaseSeconds));
  std::printf(
      "{\"streams_open\": %d, \"open_seconds\": %.1f, \"coordinator_threads_before\": %d, "
      "\"coordinator_threads_max\": %d, \"slowest_list_seconds\": %.2f, "
      "\"oldest_heartbeat_seconds\": %.2f, \"job_steps_during_hold\": %lld}\n",
      flood.open(StreamFlood::kReflection) + flood.open(StreamFlood::kWatch),
      absl::ToDoubleSeconds(open_time), baseline, seen.max_threads,
      absl::ToDoubleSeconds(seen.slowest_list), absl::ToDoubleSeconds(seen.oldest_heartbeat),
      static_cast<long long>(seen.last_step - seen.first_step));
  EXPECT_LE(seen.max_threads, baseline + 64);
  EXPECT_LT(seen.max_threads, 200);
  EXPECT_GT(seen.last_step, seen.first_step) << "the job made no progress";
  flood.CloseAll();
  EXPECT_EQ(cluster_->Sbp("cancel " + job_id_).exit_code, 0);
}

// The default caps: 256 reflection streams (per address: they carry no
// token), 1,024 streams per identity (the watches, all of the one client
// identity here). The excess is refused at once with RESOURCE_EXHAUSTED;
// nothing waits.
TEST_F(CoordinatorLimitsTest, DefaultCapsRefuseTheExcessAtOnce) {
  StartCluster("limits_default", {});
  if (HasFatalFailure()) return;
  const int baseline = ThreadCount(cluster_->coordinator().pid());
  StreamFlood flood(cluster_->address());
  flood.Open(StreamFlood::kReflection, kReflectionStreams);
  ASSERT_TRUE(flood.Settle(absl::Seconds(40))) << Logs();
  flood.Open(StreamFlood::kWatch, kWatchStreams, job_id_, "client-secret");
  ASSERT_TRUE(flood.Settle(absl::Seconds(40))) << Logs();
  EXPECT_EQ(flood.open(StreamFlood::kReflection), 256);
  EXPECT_EQ(flood.finished(StreamFlood::kReflection)[grpc::StatusCode::RESOURCE_EXHAUSTED],
            kReflectionStreams - 256);
  EXPECT_EQ(flood.first_error(StreamFlood::kReflection),
            "the coordinator already has 256 open reflection streams "
            "(--max-reflection-streams); retry later");
  EXPECT_EQ(flood.open(StreamFlood::kWatch), 1024);
  EXPECT_EQ(flood.finished(StreamFlood::kWatch)[grpc::StatusCode::RESOURCE_EXHAUSTED],
            kWatchStreams - 1024);
  EXPECT_EQ(flood.first_error(StreamFlood::kWatch),
            "identity default already has 1024 open streams (--max-streams-per-client, per "
            "identity or, without a token, per address); close some watches or retry later");
  const Observed seen = HoldAndCheck(absl::Seconds(kLeaseSeconds));
  std::printf(
      "{\"coordinator_threads_before\": %d, \"coordinator_threads_max\": %d, "
      "\"slowest_list_seconds\": %.2f, \"oldest_heartbeat_seconds\": %.2f}\n",
      baseline, seen.max_threads, absl::ToDoubleSeconds(seen.slowest_list),
      absl::ToDoubleSeconds(seen.oldest_heartbeat));
  EXPECT_LE(seen.max_threads, baseline + 64);
  flood.CloseAll();
  EXPECT_EQ(cluster_->Sbp("cancel " + job_id_).exit_code, 0);
}

// A second coordinator on the same --db exits 2 with a message naming the
// database; the first keeps serving. The lock dies with its holder: after a
// SIGKILL a new coordinator starts on the same file.
TEST(CoordinatorLockTest, SecondCoordinatorOnTheSameDatabaseExitsTwo) {
  Cluster c("limits_lock");
  c.StartCoordinator();
  const std::string db = (c.dir() / "coordinator.db").string();
  const CommandResult second =
      RunCommand(absl::StrCat(BinaryDir(), "/bin/sbp-coordinator --listen 127.0.0.1:", FreePort(),
                              " --db ", db),
                 c.dir());
  EXPECT_EQ(second.exit_code, 2) << second.err;
  EXPECT_NE(second.err.find(absl::StrCat("sbp-coordinator: the database ", db,
                                         " is in use by another sbp-coordinator (pid ",
                                         c.coordinator().pid(), "), which holds ", db, ".lock")),
            std::string::npos)
      << second.err;
  EXPECT_EQ(c.Sbp("list").exit_code, 0);

  c.KillCoordinator(SIGKILL);
  c.StartCoordinator();
  EXPECT_TRUE(c.coordinator().running());
  EXPECT_EQ(c.Sbp("list").exit_code, 0);
}

}  // namespace
}  // namespace sbp::testing
