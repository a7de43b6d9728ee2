// Preemption through the real sbp-coordinator binary, the worker side played
// over gRPC: the request to checkpoint and stop survives a SIGKILL of the
// coordinator (it is kept in SQLite), a preempted attempt is no restart
// (max_restarts still allows one), and an attempt that does not stop within
// --preemption-grace is ended anyway.
#include <gtest/gtest.h>

#include "tests/server/process_util.h"
#include "tests/server/test_util.h"

namespace sbp::server::testing {
namespace {

constexpr char kMarker[] = "serving gRPC on ";

class PreemptionRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir("preemption_recovery").string();
    binary_ = BinaryDir() + "/bin/sbp-coordinator";
    ASSERT_TRUE(std::filesystem::exists(binary_)) << binary_;
  }

  void StartCoordinator(const std::string& log_name, int grace_seconds) {
    const std::string log = dir_ + "/" + log_name;
    process_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{binary_, "--listen", "127.0.0.1:0", "--db", dir_ + "/c.db",
                                 "--lease-seconds", "3", "--preemption-grace",
                                 std::to_string(grace_seconds)},
        log);
    const std::string address = WaitForAddress(log, kMarker);
    ASSERT_FALSE(address.empty()) << ReadText(log);
    client_ = std::make_unique<Client>(address, "");
    worker_ = std::make_unique<Client>(address, "");
  }

  std::string Submit(const std::string& name, int priority, int max_restarts) {
    v1::SubmitJobResponse response;
    EXPECT_TRUE(client_
                    ->Submit(Spec(name, 1,
                                  absl::StrCat("priority: ", priority,
                                               "\nmax_restarts: ", max_restarts, "\n")),
                             &response)
                    .ok());
    return response.job().id();
  }

  bool CheckpointAsked(const std::string& worker_id, const v1::Assignment& a) {
    v1::HeartbeatResponse beat;
    if (!worker_->Heartbeat(worker_id, &beat).ok()) return false;
    for (const v1::AttemptRef& ref : beat.checkpoint_attempts()) {
      if (ref.job_id() == a.job_id() && ref.attempt() == a.attempt()) return true;
    }
    return false;
  }

  std::string Events(const std::string& id) {
    v1::JobEventsResponse events;
    EXPECT_TRUE(client_->Events(id, &events).ok());
    std::string text;
    for (const v1::JobEvent& e : events.events()) {
      absl::StrAppend(&text, v1::JobState_Name(e.to_state()), " ", e.reason(), e.message(), "\n");
    }
    return text;
  }

  std::string dir_, binary_;
  std::unique_ptr<ChildProcess> process_;
  std::unique_ptr<Client> client_, worker_;
};

TEST_F(PreemptionRecoveryTest, ARestartMidPreemptionCarriesOnAndItIsNoRestart) {
  StartCoordinator("first.log", 60);
  const std::string low = Submit("low", 0, 1);
  const std::string w = worker_->MustRegister("only");
  const v1::Assignment a = worker_->MustGetAssignment(w);
  ASSERT_EQ(a.job_id(), low);
  v1::ReportProgressResponse r;
  ASSERT_TRUE(worker_->Report(w, a, 3, &r, "runs/low/step-3").ok());
  EXPECT_FALSE(r.checkpoint_and_stop());

  const std::string high = Submit("high", 5, 0);
  ASSERT_TRUE(worker_->Report(w, a, 4, &r).ok());
  EXPECT_TRUE(r.checkpoint_and_stop());
  EXPECT_TRUE(CheckpointAsked(w, a));
  EXPECT_NE(client_->MustGet(high).reason().find("preempting lower-priority job " + low),
            std::string::npos)
      << client_->MustGet(high).reason();

  // The coordinator dies mid-preemption and comes back: the request stands.
  process_->Signal(SIGKILL);
  ASSERT_TRUE(process_->Wait(absl::Seconds(5)).has_value());
  StartCoordinator("second.log", 60);
  v1::RegisterWorkerResponse again;
  ASSERT_TRUE(worker_->Register("only", int64_t{16} << 30, &again, w).ok());
  EXPECT_TRUE(CheckpointAsked(w, a));
  ASSERT_TRUE(worker_->Report(w, a, 5, &r, "runs/low/step-5").ok());
  EXPECT_TRUE(r.checkpoint_and_stop());
  ASSERT_TRUE(worker_->Finish(w, a, v1::OUTCOME_PREEMPTED).ok());

  v1::Job waiting = client_->MustGet(low);
  EXPECT_EQ(waiting.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(waiting.reason().rfind("preempted by " + high, 0), 0u) << waiting.reason();
  EXPECT_EQ(waiting.preemptions(), 1);
  EXPECT_EQ(waiting.last_checkpoint(), "runs/low/step-5");
  const std::string events = Events(low);
  EXPECT_NE(events.find("preempted by higher-priority job " + high), std::string::npos) << events;
  EXPECT_NE(events.find("JOB_STATE_PENDING preempted by " + high +
                        ": attempt 1 stopped after step 5; it resumes from checkpoint "
                        "runs/low/step-5"),
            std::string::npos)
      << events;

  // The worker goes to the high-priority job, then back to the low one.
  const v1::Assignment h = worker_->MustGetAssignment(w);
  EXPECT_EQ(h.job_id(), high);
  ASSERT_TRUE(worker_->Finish(w, h, v1::OUTCOME_SUCCEEDED).ok());
  const v1::Assignment resumed = worker_->MustGetAssignment(w);
  EXPECT_EQ(resumed.job_id(), low);
  EXPECT_EQ(resumed.attempt(), 2);
  // The preemption used no restart: max_restarts 1 still retries a failure.
  ASSERT_TRUE(
      worker_->Finish(w, resumed, v1::OUTCOME_FAILED, v1::FAILURE_CLASS_INTERNAL, "boom").ok());
  const v1::Job retried = client_->MustGet(low);
  EXPECT_NE(retried.state(), v1::JOB_STATE_FAILED) << retried.reason();
  EXPECT_EQ(retried.preemptions(), 1);
  EXPECT_NE(Events(low).find("restart 1 of 1"), std::string::npos) << Events(low);
}

TEST_F(PreemptionRecoveryTest, TheGraceEndsAnAttemptThatDoesNotStop) {
  StartCoordinator("grace.log", 1);
  const std::string low = Submit("low", 0, 0);
  const std::string w = worker_->MustRegister("only");
  const v1::Assignment a = worker_->MustGetAssignment(w);
  v1::ReportProgressResponse r;
  ASSERT_TRUE(worker_->Report(w, a, 2, &r, "runs/low/step-2").ok());
  const std::string high = Submit("high", 5, 0);
  // The worker never stops; within the grace (and a scheduler tick) the
  // attempt is ended anyway and told to stop.
  ASSERT_TRUE(WaitFor([&] { return client_->MustGet(low).state() == v1::JOB_STATE_PENDING; },
                      absl::Seconds(10)));
  const v1::Job ended = client_->MustGet(low);
  EXPECT_EQ(ended.reason().rfind("preempted by " + high, 0), 0u) << ended.reason();
  EXPECT_EQ(ended.failure_class(), v1::FAILURE_CLASS_UNSPECIFIED);
  const std::string events = Events(low);
  EXPECT_NE(events.find("attempt 1 did not checkpoint within the 1 s grace (--preemption-grace) "
                        "and was ended; it resumes from its last checkpoint runs/low/step-2"),
            std::string::npos)
      << events;
  v1::HeartbeatResponse beat;
  ASSERT_TRUE(worker_->Heartbeat(w, &beat).ok());
  ASSERT_EQ(beat.stop_attempts_size(), 1);
  EXPECT_EQ(beat.stop_attempts(0).job_id(), low);
  EXPECT_EQ(worker_->MustGetAssignment(w).job_id(), high);
}

}  // namespace
}  // namespace sbp::server::testing
