// A worker that comes back after its lease expired may still be training
// the attempt the coordinator gave up on: it reports that attempt in
// Register and Heartbeat, is told to stop it, and is not idle (nothing is
// scheduled on it) until it reports it no longer runs it.
#include <gtest/gtest.h>

#include "tests/server/coordinator_fixture.h"

namespace sbp::server::testing {
namespace {

class FinishingWorkerTest : public CoordinatorTest {
 protected:
  // Register / Heartbeat carrying the attempt the worker still runs.
  grpc::Status Register(const std::string& id, const v1::Assignment* running,
                        v1::RegisterWorkerResponse* out) {
    v1::RegisterWorkerRequest request;
    request.set_name("host-a");
    request.set_device(v1::DEVICE_KIND_CPU);
    request.set_memory_bytes(int64_t{16} << 30);
    request.set_worker_id(id);
    if (running != nullptr) {
      request.mutable_running()->set_job_id(running->job_id());
      request.mutable_running()->set_attempt(running->attempt());
    }
    return worker_->workers().Register(worker_->Context().get(), request, out);
  }
  v1::HeartbeatResponse Heartbeat(const std::string& id, const v1::Assignment* running) {
    v1::HeartbeatRequest request;
    request.set_worker_id(id);
    if (running != nullptr) {
      request.mutable_running()->set_job_id(running->job_id());
      request.mutable_running()->set_attempt(running->attempt());
    }
    v1::HeartbeatResponse response;
    EXPECT_TRUE(worker_->workers().Heartbeat(worker_->Context().get(), request, &response).ok());
    return response;
  }
  std::string WorkerState(const std::string& id) {
    v1::ListWorkersResponse workers;
    EXPECT_TRUE(client_->ListWorkers(&workers).ok());
    for (const v1::Worker& w : workers.workers()) {
      if (w.id() == id) return w.state();
    }
    return "";
  }
};

TEST_F(FinishingWorkerTest, NotIdleUntilItsStaleAttemptHasStopped) {
  CoordinatorOptions options;
  options.lease_seconds = 1;
  Start(options);
  const std::string job = MustSubmit(Spec("stale"));
  const std::string w = worker_->MustRegister("host-a");
  const v1::Assignment first = worker_->MustGetAssignment(w);
  ASSERT_EQ(first.attempt(), 1);
  // Silence past the lease: the worker is lost, the attempt retried.
  ASSERT_TRUE(WaitFor(
      [&] { return client_->MustGet(job).attempt() == 1 && StateOf(job) == v1::JOB_STATE_PENDING; },
      absl::Seconds(10)));

  // It comes back still training attempt 1: busy, and told to stop it.
  v1::RegisterWorkerResponse registered;
  ASSERT_TRUE(Register(w, &first, &registered).ok());
  EXPECT_EQ(WorkerState(w), "busy");
  EXPECT_EQ(StateOf(job), v1::JOB_STATE_PENDING) << "scheduled on a worker still busy";
  const v1::HeartbeatResponse beat = Heartbeat(w, &first);
  ASSERT_EQ(beat.stop_attempts_size(), 1);
  EXPECT_EQ(beat.stop_attempts(0).job_id(), job);
  EXPECT_EQ(beat.stop_attempts(0).attempt(), 1);
  EXPECT_EQ(StateOf(job), v1::JOB_STATE_PENDING);

  // Once it says it runs nothing, it is idle and takes the retry.
  Heartbeat(w, nullptr);
  ASSERT_TRUE(WaitFor([&] { return StateOf(job) == v1::JOB_STATE_SCHEDULED; }));
  EXPECT_EQ(worker_->MustGetAssignment(w).attempt(), 2);
}

}  // namespace
}  // namespace sbp::server::testing
