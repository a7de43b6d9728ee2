// Crash recovery with the real binary: sbp-coordinator is SIGKILLed mid-job
// and restarted on the same database. Every job and event is still there; a
// worker that comes back with its old id keeps its job; one that does not
// come back within the lease has its attempt requeued as LOST_WORKER.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include "tests/server/process_util.h"
#include "tests/server/test_util.h"

namespace sbp::server::testing {
namespace {

constexpr char kMarker[] = "serving gRPC on ";

class RecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir("recovery").string();
    binary_ = BinaryDir() + "/bin/sbp-coordinator";
    ASSERT_TRUE(std::filesystem::exists(binary_)) << binary_;
    std::ofstream(dir_ + "/client.token") << "client-secret\n";
    std::ofstream(dir_ + "/worker.token") << "worker-secret\n";
  }

  // Starts the binary and connects a client and a worker to it.
  void StartCoordinator(const std::string& log_name) {
    const std::string log = dir_ + "/" + log_name;
    process_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{binary_, "--listen", "127.0.0.1:0", "--db", dir_ + "/c.db",
                                 "--lease-seconds", "2", "--client-token-file",
                                 dir_ + "/client.token", "--worker-token-file",
                                 dir_ + "/worker.token"},
        log);
    const std::string address = WaitForAddress(log, kMarker);
    ASSERT_FALSE(address.empty()) << ReadText(log);
    client_ = std::make_unique<Client>(address, "client-secret");
    worker_ = std::make_unique<Client>(address, "worker-secret");
  }

  std::map<std::string, std::vector<std::string>> AllEvents(const std::vector<std::string>& ids) {
    std::map<std::string, std::vector<std::string>> out;
    for (const std::string& id : ids) {
      v1::JobEventsResponse events;
      EXPECT_TRUE(client_->Events(id, &events).ok());
      for (const v1::JobEvent& e : events.events()) {
        out[id].push_back(absl::StrCat(e.sequence(), " ", v1::JobState_Name(e.from_state()), "->",
                                       v1::JobState_Name(e.to_state()), " ", e.reason(), " ",
                                       e.message()));
      }
    }
    return out;
  }

  std::string dir_, binary_;
  std::unique_ptr<ChildProcess> process_;
  std::unique_ptr<Client> client_, worker_;
};

TEST_F(RecoveryTest, SigkillLosesNothingAndWorkersComeBack) {
  StartCoordinator("first.log");
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    v1::SubmitJobResponse response;
    ASSERT_TRUE(client_
                    ->Submit(Spec(absl::StrCat("job", i), i < 2 ? 1 : 2), &response,
                             absl::StrCat("req-", i))
                    .ok());
    ids.push_back(response.job().id());
  }
  const std::string w1 = worker_->MustRegister("one");
  v1::Assignment a1 = worker_->MustGetAssignment(w1);
  const std::string w2 = worker_->MustRegister("two");
  v1::Assignment a2 = worker_->MustGetAssignment(w2);
  ASSERT_EQ(a1.job_id(), ids[0]);
  ASSERT_EQ(a2.job_id(), ids[1]);
  v1::ReportProgressResponse r;
  ASSERT_TRUE(worker_->Report(w1, a1, 4, &r, "runs/job0/step-4").ok());
  ASSERT_TRUE(worker_->Report(w2, a2, 2, &r, "runs/job1/step-2").ok());
  std::map<std::string, v1::Job> before;
  for (const std::string& id : ids) before[id] = client_->MustGet(id);
  EXPECT_EQ(before[ids[0]].state(), v1::JOB_STATE_RUNNING);
  const auto events_before = AllEvents(ids);

  process_->Signal(SIGKILL);
  ASSERT_TRUE(process_->Wait(absl::Seconds(5)).has_value());
  StartCoordinator("second.log");

  // w1 comes back at once with its old id and keeps its lease; w2 never does.
  v1::RegisterWorkerResponse again;
  ASSERT_TRUE(worker_->Register("one", int64_t{16} << 30, &again, w1).ok());
  EXPECT_EQ(again.worker_id(), w1);
  std::atomic<bool> stop{false};
  std::thread heartbeats([&] {
    while (!stop) {
      v1::HeartbeatResponse beat;
      worker_->Heartbeat(w1, &beat);
      absl::SleepFor(absl::Milliseconds(200));
    }
  });

  // Every job (with its spec) and every event survived the SIGKILL.
  v1::ListJobsResponse list;
  v1::ListJobsRequest with_spec;
  with_spec.set_with_spec(true);
  ASSERT_TRUE(client_->List(with_spec, &list).ok());
  ASSERT_EQ(list.jobs_size(), 5);
  for (const v1::Job& job : list.jobs()) {
    const v1::Job& old = before[job.id()];
    EXPECT_EQ(job.name(), old.name());
    EXPECT_EQ(job.spec_yaml(), old.spec_yaml());
    EXPECT_EQ(job.request_id(), old.request_id());
    EXPECT_GE(job.revision(), old.revision());
  }
  const auto events_after = AllEvents(ids);
  for (const std::string& id : ids) {
    const auto& old = events_before.at(id);
    const auto& now = events_after.at(id);
    ASSERT_GE(now.size(), old.size()) << id;
    EXPECT_TRUE(std::equal(old.begin(), old.end(), now.begin())) << id;
  }
  // Idempotency survives too.
  v1::SubmitJobResponse resubmitted;
  ASSERT_TRUE(client_->Submit(Spec("job0"), &resubmitted, "req-0").ok());
  EXPECT_FALSE(resubmitted.created());
  EXPECT_EQ(resubmitted.job().id(), ids[0]);

  // w1 keeps its job and finishes it.
  v1::Job kept = client_->MustGet(ids[0]);
  EXPECT_EQ(kept.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(kept.attempt(), 1);
  EXPECT_EQ(kept.progress().step(), 4);
  EXPECT_EQ(kept.last_checkpoint(), "runs/job0/step-4");
  ASSERT_TRUE(worker_->Report(w1, a1, 5, &r).ok());
  EXPECT_FALSE(r.cancel_requested());
  ASSERT_TRUE(worker_->Finish(w1, a1, v1::OUTCOME_SUCCEEDED).ok());
  EXPECT_EQ(client_->MustGet(ids[0]).state(), v1::JOB_STATE_SUCCEEDED);

  // w2's attempt is failed after the lease and the job moves to w1.
  v1::Assignment moved = worker_->MustGetAssignment(w1, 10);
  stop = true;
  heartbeats.join();
  EXPECT_EQ(moved.job_id(), ids[1]);
  EXPECT_EQ(moved.attempt(), 2);
  v1::Job requeued = client_->MustGet(ids[1]);
  EXPECT_EQ(requeued.failure_class(), v1::FAILURE_CLASS_LOST_WORKER);
  EXPECT_EQ(requeued.last_checkpoint(), "runs/job1/step-2");
  v1::HeartbeatResponse beat;
  ASSERT_TRUE(worker_->Heartbeat(w2, &beat).ok());
  EXPECT_FALSE(beat.registered());
  // The gang jobs still wait, and say why.
  EXPECT_EQ(client_->MustGet(ids[2]).reason(),
            "needs 2 cpu workers but only 1 is registered; waiting for workers to join");

  // SIGTERM is a clean stop.
  process_->Signal(SIGTERM);
  std::optional<int> status = process_->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  EXPECT_NE(ReadText(dir_ + "/second.log").find("coordinator stopped"), std::string::npos);
}

TEST_F(RecoveryTest, BadFlagsExitTwo) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{}, "--db is required"},
      {{"--db", dir_ + "/x.db", "--lease-seconds", "soon"}, "--lease-seconds"},
      {{"--db", dir_ + "/x.db", "--lease-seconds", "0"}, "--lease-seconds"},
      {{"--db", dir_ + "/x.db", "--tls-cert", dir_ + "/client.token"},
       "give both --tls-cert and --tls-key"},
      {{"--db", dir_ + "/x.db", "--client-token-file", dir_ + "/missing"}, "missing"},
      {{"--db", dir_ + "/x.db", "--listen", "nonsense"}, "listen: must be HOST:PORT"},
  };
  int n = 0;
  for (const Case& c : cases) {
    std::vector<std::string> argv{binary_};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const std::string log = dir_ + "/bad" + std::to_string(n++) + ".log";
    ChildProcess child(argv, log);
    std::optional<int> status = child.Wait(absl::Seconds(10));
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << c.message;
    EXPECT_NE(ReadText(log).find(c.message), std::string::npos) << ReadText(log);
  }
}

}  // namespace
}  // namespace sbp::server::testing
