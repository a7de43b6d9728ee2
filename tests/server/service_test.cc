// The three services over real gRPC on loopback, with the test acting as
// both the client and the workers.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "tests/server/coordinator_fixture.h"

namespace sbp::server::testing {
namespace {

using ::grpc::StatusCode;

std::vector<v1::JobState> EventStates(Client& client, const std::string& id) {
  v1::JobEventsResponse events;
  EXPECT_TRUE(client.Events(id, &events).ok());
  std::vector<v1::JobState> states;
  for (const v1::JobEvent& e : events.events()) {
    if (e.from_state() != e.to_state()) states.push_back(e.to_state());
  }
  return states;
}

class ServiceTest : public CoordinatorTest {};

TEST_F(ServiceTest, SubmitRunSucceed) {
  Start();
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(client_->Submit(Spec("tiny"), &submitted).ok());
  const v1::Job& job = submitted.job();
  EXPECT_TRUE(submitted.created());
  EXPECT_EQ(job.name(), "tiny");
  EXPECT_EQ(job.id().rfind("tiny-", 0), 0u) << job.id();
  EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(job.reason(), "no cpu workers registered");
  EXPECT_EQ(job.attempt(), 0);
  EXPECT_EQ(job.max_restarts(), 3);
  EXPECT_EQ(job.world_size(), 1);
  EXPECT_TRUE(job.has_created_at());

  const std::string w = worker_->MustRegister("host-a");
  EXPECT_EQ(StateOf(job.id()), v1::JOB_STATE_SCHEDULED);
  v1::Assignment a = worker_->MustGetAssignment(w);
  EXPECT_EQ(a.job_id(), job.id());
  EXPECT_EQ(a.attempt(), 1);
  EXPECT_EQ(a.rank(), 0);
  EXPECT_EQ(a.world_size(), 1);
  EXPECT_EQ(a.spec_yaml(), Spec("tiny"));
  EXPECT_EQ(a.rendezvous_scope(), job.id() + "/1");

  v1::ReportProgressResponse progress;
  ASSERT_TRUE(worker_->Report(w, a, 3, &progress, "runs/tiny/step-3", "loss 2.5").ok());
  EXPECT_FALSE(progress.cancel_requested());
  v1::Job running = client_->MustGet(job.id());
  EXPECT_EQ(running.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(running.progress().step(), 3);
  EXPECT_EQ(running.progress().total_steps(), 10);
  EXPECT_EQ(running.progress().peak_bytes(), 1 << 20);
  EXPECT_EQ(running.last_checkpoint(), "runs/tiny/step-3");
  EXPECT_EQ(running.worker_ids_size(), 1);
  EXPECT_EQ(running.worker_ids(0), w);
  EXPECT_TRUE(running.has_started_at());

  ASSERT_TRUE(worker_->Finish(w, a, v1::OUTCOME_SUCCEEDED).ok());
  v1::Job done = client_->MustGet(job.id());
  EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(done.reason(), "finished at step 3");
  EXPECT_TRUE(done.has_finished_at());
  EXPECT_EQ(EventStates(*client_, job.id()),
            (std::vector<v1::JobState>{v1::JOB_STATE_PENDING, v1::JOB_STATE_SCHEDULED,
                                       v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED}));

  // Events: ordered, with the checkpoint and log line in between.
  v1::JobEventsResponse events;
  ASSERT_TRUE(client_->Events(job.id(), &events).ok());
  std::vector<std::string> messages;
  for (int i = 0; i < events.events_size(); ++i) {
    EXPECT_EQ(events.events(i).sequence(), i + 1);
    if (!events.events(i).message().empty()) messages.push_back(events.events(i).message());
  }
  // The model path is relative and this coordinator has no work directory:
  // admission says the memory was not planned.
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[0].rfind("memory not planned: the model path 'examples/models/tiny-qwen3' "
                              "is relative",
                              0),
            0u)
      << messages[0];
  EXPECT_EQ(
      std::vector<std::string>(messages.begin() + 1, messages.end()),
      (std::vector<std::string>{"checkpoint runs/tiny/step-3 at step 3", "rank 0: loss 2.5"}));
  v1::JobEventsResponse later;
  ASSERT_TRUE(client_->Events(job.id(), &later, events.events_size() - 1).ok());
  ASSERT_EQ(later.events_size(), 1);
  EXPECT_EQ(later.events(0).to_state(), v1::JOB_STATE_SUCCEEDED);

  // The worker is idle again and shows up in ListWorkers.
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(client_->ListWorkers(&workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).id(), w);
  EXPECT_EQ(workers.workers(0).name(), "host-a");
  EXPECT_EQ(workers.workers(0).state(), "idle");
  EXPECT_EQ(workers.workers(0).device(), v1::DEVICE_KIND_CPU);
}

// Online GRPO's rollout figures travel from a worker's report to a client
// as they came; a job without rollouts shows none (not zeros).
TEST_F(ServiceTest, ProgressCarriesRolloutFiguresOnlyWhenPresent) {
  Start();
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(client_->Submit(Spec("grpo"), &submitted).ok());
  const std::string w = worker_->MustRegister("host-a");
  v1::Assignment a = worker_->MustGetAssignment(w);
  v1::ReportProgressResponse response;
  ASSERT_TRUE(worker_->Report(w, a, 1, &response).ok());
  EXPECT_FALSE(client_->MustGet(a.job_id()).progress().has_rollout());

  v1::ReportProgressRequest request;
  request.set_worker_id(w);
  request.set_job_id(a.job_id());
  request.set_attempt(a.attempt());
  request.set_rank(a.rank());
  request.mutable_progress()->set_step(2);
  request.mutable_progress()->set_total_steps(10);
  v1::RolloutProgress* rollout = request.mutable_progress()->mutable_rollout();
  rollout->set_reward_mean(0.42);
  rollout->set_reward_std(0.1);
  rollout->set_completion_length_mean(37.5);
  rollout->set_completion_length_max(64);
  rollout->set_truncated_fraction(0.05);
  rollout->set_rollout_tokens_per_second(400);
  rollout->set_rollout_seconds(1.5);
  rollout->set_train_seconds(0.5);
  ASSERT_TRUE(worker_->workers().ReportProgress(worker_->Context().get(), request, &response).ok());
  const v1::Job job = client_->MustGet(a.job_id());
  EXPECT_EQ(job.progress().step(), 2);
  ASSERT_TRUE(job.progress().has_rollout());
  EXPECT_DOUBLE_EQ(job.progress().rollout().reward_mean(), 0.42);
  EXPECT_DOUBLE_EQ(job.progress().rollout().reward_std(), 0.1);
  EXPECT_DOUBLE_EQ(job.progress().rollout().completion_length_mean(), 37.5);
  EXPECT_EQ(job.progress().rollout().completion_length_max(), 64);
  EXPECT_DOUBLE_EQ(job.progress().rollout().truncated_fraction(), 0.05);
  EXPECT_DOUBLE_EQ(job.progress().rollout().rollout_tokens_per_second(), 400);
  EXPECT_DOUBLE_EQ(job.progress().rollout().rollout_seconds(), 1.5);
  EXPECT_DOUBLE_EQ(job.progress().rollout().train_seconds(), 0.5);
}

TEST_F(ServiceTest, SubmitIsIdempotentOnRequestId) {
  Start();
  v1::SubmitJobResponse first, second, third;
  ASSERT_TRUE(client_->Submit(Spec("tiny"), &first, "req-1").ok());
  // Same document, different formatting: still the same submission.
  ASSERT_TRUE(client_->Submit(Spec("tiny") + "\n# a comment\n", &second, "req-1").ok());
  EXPECT_TRUE(first.created());
  EXPECT_FALSE(second.created());
  EXPECT_EQ(first.job().id(), second.job().id());
  EXPECT_EQ(second.job().request_id(), "req-1");
  grpc::Status clash = client_->Submit(Spec("other"), &third, "req-1");
  EXPECT_EQ(clash.error_code(), StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(clash.error_message(),
            "request_id: \"req-1\" was already used for job " + first.job().id() +
                " with a different spec; use a new request_id for a new job");
  v1::ListJobsResponse list;
  ASSERT_TRUE(client_->List(v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 1);
}

TEST_F(ServiceTest, WatchSendsSnapshotThenEveryChange) {
  Start();
  const std::string id = MustSubmit(Spec("watched"));
  std::vector<v1::Job> seen;
  std::atomic<bool> first{false};
  grpc::Status watch_status;
  std::thread watcher([&] {
    auto context = client_->Context(absl::Seconds(20));
    v1::WatchJobRequest request;
    request.set_id(id);
    auto reader = client_->jobs().Watch(context.get(), request);
    v1::JobUpdate update;
    while (reader->Read(&update)) {
      seen.push_back(update.job());
      first = true;
    }
    watch_status = reader->Finish();
  });
  ASSERT_TRUE(WaitFor([&] { return first.load(); }));
  const std::string w = worker_->MustRegister("host");
  v1::Assignment a = worker_->MustGetAssignment(w);
  v1::ReportProgressResponse r;
  for (int step = 1; step <= 3; ++step) ASSERT_TRUE(worker_->Report(w, a, step, &r).ok());
  ASSERT_TRUE(worker_->Finish(w, a, v1::OUTCOME_SUCCEEDED).ok());
  watcher.join();
  EXPECT_TRUE(watch_status.ok()) << watch_status.error_message();
  ASSERT_GE(seen.size(), 4u);
  EXPECT_EQ(seen.front().state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(seen.back().state(), v1::JOB_STATE_SUCCEEDED);
  std::vector<v1::JobState> states;
  for (size_t i = 0; i < seen.size(); ++i) {
    if (i > 0) {
      EXPECT_GT(seen[i].revision(), seen[i - 1].revision());
    }
    if (states.empty() || states.back() != seen[i].state()) states.push_back(seen[i].state());
  }
  EXPECT_EQ(states, (std::vector<v1::JobState>{v1::JOB_STATE_PENDING, v1::JOB_STATE_SCHEDULED,
                                               v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED}));
  EXPECT_EQ(seen.back().progress().step(), 3);

  // A finished job: one snapshot, then the stream ends.
  auto context = client_->Context();
  v1::WatchJobRequest request;
  request.set_id(id);
  auto reader = client_->jobs().Watch(context.get(), request);
  v1::JobUpdate update;
  ASSERT_TRUE(reader->Read(&update));
  EXPECT_EQ(update.job().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_FALSE(reader->Read(&update));
  EXPECT_TRUE(reader->Finish().ok());

  // An unknown job.
  auto missing_context = client_->Context();
  request.set_id("no-such-job");
  auto missing = client_->jobs().Watch(missing_context.get(), request);
  EXPECT_FALSE(missing->Read(&update));
  grpc::Status status = missing->Finish();
  EXPECT_EQ(status.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "no job with id \"no-such-job\"");
}

TEST_F(ServiceTest, ManyWatchersAllSeeTheEnd) {
  Start();
  const std::string id = MustSubmit(Spec("popular"));
  constexpr int kWatchers = 64;
  std::atomic<int> started{0}, finished{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWatchers; ++i) {
    threads.emplace_back([&] {
      auto context = client_->Context(absl::Seconds(20));
      v1::WatchJobRequest request;
      request.set_id(id);
      auto reader = client_->jobs().Watch(context.get(), request);
      v1::JobUpdate update, last;
      bool counted = false;
      while (reader->Read(&update)) {
        if (!counted) {
          started++;
          counted = true;
        }
        last = update;
      }
      if (reader->Finish().ok() && last.job().state() == v1::JOB_STATE_CANCELLED) finished++;
    });
  }
  ASSERT_TRUE(WaitFor([&] { return started.load() == kWatchers; }));
  v1::Job cancelled;
  ASSERT_TRUE(client_->Cancel(id, &cancelled).ok());
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(finished.load(), kWatchers);
}

TEST_F(ServiceTest, ListPagesNewestFirstAndFilters) {
  Start();
  std::vector<std::string> ids;
  for (int i = 0; i < 25; ++i) ids.push_back(MustSubmit(Spec(absl::StrCat("job", i))));
  for (int i = 0; i < 25; i += 5) {
    v1::Job job;
    ASSERT_TRUE(client_->Cancel(ids[i], &job).ok());
  }
  std::vector<std::string> listed;
  v1::ListJobsRequest request;
  request.set_page_size(10);
  int pages = 0;
  while (true) {
    v1::ListJobsResponse response;
    ASSERT_TRUE(client_->List(request, &response).ok());
    ++pages;
    for (const v1::Job& job : response.jobs()) listed.push_back(job.id());
    if (response.next_page_token().empty()) break;
    request.set_page_token(response.next_page_token());
  }
  EXPECT_EQ(pages, 3);
  std::vector<std::string> newest_first(ids.rbegin(), ids.rend());
  EXPECT_EQ(listed, newest_first);

  v1::ListJobsRequest filtered;
  filtered.add_states(v1::JOB_STATE_CANCELLED);
  v1::ListJobsResponse cancelled;
  ASSERT_TRUE(client_->List(filtered, &cancelled).ok());
  ASSERT_EQ(cancelled.jobs_size(), 5);
  EXPECT_EQ(cancelled.jobs(0).id(), ids[20]);
  EXPECT_TRUE(cancelled.next_page_token().empty());
  filtered.add_states(v1::JOB_STATE_PENDING);
  v1::ListJobsResponse both;
  ASSERT_TRUE(client_->List(filtered, &both).ok());
  EXPECT_EQ(both.jobs_size(), 25);

  v1::ListJobsRequest defaults;  // page_size 0: 100
  v1::ListJobsResponse all;
  ASSERT_TRUE(client_->List(defaults, &all).ok());
  EXPECT_EQ(all.jobs_size(), 25);
  defaults.set_page_size(100000);  // clamped to 1000
  ASSERT_TRUE(client_->List(defaults, &all).ok());

  v1::ListJobsRequest bad;
  bad.set_page_size(-1);
  grpc::Status status = client_->List(bad, &all);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "page_size: must not be negative (got -1)");
  bad.set_page_size(10);
  bad.set_page_token("garbage!");
  status = client_->List(bad, &all);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "page_token: is not a token returned by an earlier List call");
}

TEST_F(ServiceTest, CancelSemantics) {
  Start();
  // A pending job.
  const std::string pending = MustSubmit(Spec("pending", 4));
  v1::Job job;
  ASSERT_TRUE(client_->Cancel(pending, &job, "changed my mind").ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(job.reason(), "cancelled: changed my mind");

  // A running job: the worker hears about it and finishes as cancelled.
  const std::string running = MustSubmit(Spec("running"));
  const std::string w = worker_->MustRegister("host");
  v1::Assignment a = worker_->MustGetAssignment(w);
  v1::ReportProgressResponse r;
  ASSERT_TRUE(worker_->Report(w, a, 1, &r).ok());
  ASSERT_TRUE(client_->Cancel(running, &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(job.reason(), "cancelled by the user");
  ASSERT_TRUE(worker_->Report(w, a, 2, &r).ok());
  EXPECT_TRUE(r.cancel_requested());
  v1::HeartbeatResponse beat;
  ASSERT_TRUE(worker_->Heartbeat(w, &beat).ok());
  ASSERT_EQ(beat.stop_attempts_size(), 1);
  EXPECT_EQ(beat.stop_attempts(0).job_id(), running);
  EXPECT_EQ(beat.stop_attempts(0).attempt(), 1);
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(client_->ListWorkers(&workers).ok());
  EXPECT_EQ(workers.workers(0).state(), "busy");  // until it lets go
  ASSERT_TRUE(worker_->Finish(w, a, v1::OUTCOME_CANCELLED).ok());
  ASSERT_TRUE(client_->ListWorkers(&workers).ok());
  EXPECT_EQ(workers.workers(0).state(), "idle");
  EXPECT_EQ(StateOf(running), v1::JOB_STATE_CANCELLED);

  // Finished jobs cannot be cancelled; unknown ids are NOT_FOUND.
  grpc::Status again = client_->Cancel(running, &job);
  EXPECT_EQ(again.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(again.error_message(),
            "job " + running +
                " already finished (CANCELLED); only PENDING, SCHEDULED, RUNNING or RETRYING "
                "jobs can be cancelled");
  const std::string done = MustSubmit(Spec("done"));
  v1::Assignment d = worker_->MustGetAssignment(w);
  ASSERT_TRUE(worker_->Finish(w, d, v1::OUTCOME_SUCCEEDED).ok());
  EXPECT_EQ(client_->Cancel(done, &job).error_code(), StatusCode::FAILED_PRECONDITION);
  grpc::Status missing = client_->Cancel("nope", &job);
  EXPECT_EQ(missing.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(missing.error_message(), "no job with id \"nope\"");
}

TEST_F(ServiceTest, StaleAttemptsAndStrangersAreAborted) {
  Start();
  const std::string id = MustSubmit(Spec("tiny"));
  const std::string w = worker_->MustRegister("a");
  const std::string other = worker_->MustRegister("b");
  v1::Assignment a = worker_->MustGetAssignment(w);
  v1::ReportProgressResponse r;

  v1::Assignment stale = a;
  stale.set_attempt(7);
  grpc::Status status = worker_->Report(w, stale, 1, &r);
  EXPECT_EQ(status.error_code(), StatusCode::ABORTED);
  EXPECT_EQ(status.error_message(),
            "attempt 7 of job " + id + " is stale: the job is on attempt 1");
  status = worker_->Report(other, a, 1, &r);
  EXPECT_EQ(status.error_code(), StatusCode::ABORTED);
  EXPECT_EQ(status.error_message(),
            "worker " + other + " does not hold rank 0 of job " + id + " attempt 1");
  status = worker_->Finish(other, a, v1::OUTCOME_SUCCEEDED);
  EXPECT_EQ(status.error_code(), StatusCode::ABORTED);
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_SCHEDULED);
  ASSERT_TRUE(worker_->Report(w, a, 1, &r).ok());
  ASSERT_TRUE(worker_->Finish(w, a, v1::OUTCOME_SUCCEEDED).ok());
  status = worker_->Finish(w, a, v1::OUTCOME_SUCCEEDED);
  EXPECT_EQ(status.error_code(), StatusCode::ABORTED);
}

TEST_F(ServiceTest, OutOfMemoryFailsWithoutRetry) {
  Start();
  const std::string id = MustSubmit(Spec("oom"));
  const std::string w = worker_->MustRegister("host");
  v1::Assignment a = worker_->MustGetAssignment(w);
  ASSERT_TRUE(worker_
                  ->Finish(w, a, v1::OUTCOME_FAILED, v1::FAILURE_CLASS_OUT_OF_MEMORY,
                           "allocating 2.0 GiB with 1.5 GiB in use exceeds the budget of 3 GiB")
                  .ok());
  v1::Job job = client_->MustGet(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.failure_class(), v1::FAILURE_CLASS_OUT_OF_MEMORY);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.reason(),
            "attempt 1 failed: rank 0 on worker " + w +
                " failed (OUT_OF_MEMORY): allocating 2.0 GiB with 1.5 GiB in use exceeds the "
                "budget of 3 GiB; out of memory is not retried (the same plan runs out again): "
                "lower seq_len or streambp.chunk_tokens, use streambp.mode: stream, or run on "
                "workers with more memory");
  // A retryable failure restarts instead.
  const std::string retried = MustSubmit(Spec("flaky"));
  v1::Assignment b = worker_->MustGetAssignment(w);
  ASSERT_TRUE(
      worker_->Finish(w, b, v1::OUTCOME_FAILED, v1::FAILURE_CLASS_INTERNAL, "NCCL error").ok());
  v1::Assignment again = worker_->MustGetAssignment(w);
  EXPECT_EQ(again.job_id(), retried);
  EXPECT_EQ(again.attempt(), 2);
  EXPECT_EQ(EventStates(*client_, retried),
            (std::vector<v1::JobState>{v1::JOB_STATE_PENDING, v1::JOB_STATE_SCHEDULED,
                                       v1::JOB_STATE_RETRYING, v1::JOB_STATE_PENDING,
                                       v1::JOB_STATE_SCHEDULED}));
}

TEST_F(ServiceTest, GangWaitsForAllWorkersAndSaysWhy) {
  Start();
  const std::string w1 = worker_->MustRegister("one");
  const std::string w2 = worker_->MustRegister("two");
  const std::string small = MustSubmit(Spec("small"));
  v1::Assignment a = worker_->MustGetAssignment(w1);
  ASSERT_EQ(a.job_id(), small);
  const std::string gang = MustSubmit(Spec("gang", 2));
  v1::Job waiting = client_->MustGet(gang);
  EXPECT_EQ(waiting.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(waiting.reason(), "needs 2 idle cpu workers; 1 idle (1 busy, 0 too small)");
  v1::GetAssignmentResponse none;
  ASSERT_TRUE(worker_->GetAssignment(w2, 0, &none).ok());
  EXPECT_FALSE(none.has_assignment());

  ASSERT_TRUE(worker_->Finish(w1, a, v1::OUTCOME_SUCCEEDED).ok());
  v1::Assignment r0 = worker_->MustGetAssignment(w1);
  v1::Assignment r1 = worker_->MustGetAssignment(w2);
  EXPECT_EQ(r0.job_id(), gang);
  EXPECT_EQ(r1.job_id(), gang);
  EXPECT_EQ(std::set<int>({r0.rank(), r1.rank()}), std::set<int>({0, 1}));
  EXPECT_EQ(r0.world_size(), 2);
  v1::ReportProgressResponse r;
  ASSERT_TRUE(worker_->Report(w1, r0, 1, &r).ok());
  ASSERT_TRUE(worker_->Finish(w1, r0, v1::OUTCOME_SUCCEEDED).ok());
  EXPECT_EQ(StateOf(gang), v1::JOB_STATE_RUNNING);  // rank 1 still running
  ASSERT_TRUE(worker_->Finish(w2, r1, v1::OUTCOME_SUCCEEDED).ok());
  v1::Job done = client_->MustGet(gang);
  EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(done.reason(), "all 2 ranks finished at step 1");
}

TEST_F(ServiceTest, MemoryRequirementFiltersWorkers) {
  Start();
  worker_->MustRegister("small", int64_t{8} << 30);
  const std::string id = MustSubmit(Spec("any"));
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_SCHEDULED);  // no requirement: fits
  const std::string needy =
      MustSubmit(absl::StrCat("name: needy\nmodel: m\ndata: d.jsonl\nobjective: sft\nseq_len: 8\n"
                              "resources: {world_size: 1, device: cpu, memory: 12GiB}\n"));
  v1::Job job = client_->MustGet(needy);
  EXPECT_EQ(job.required_memory_bytes(), int64_t{12} << 30);
  EXPECT_EQ(job.reason(),
            "needs 1 cpu worker with >= 12.0 GiB but only 0 of 1 registered cpu workers have "
            "enough memory; waiting for workers to join");
  const std::string big = worker_->MustRegister("big", int64_t{16} << 30);
  v1::Assignment a = worker_->MustGetAssignment(big);
  EXPECT_EQ(a.job_id(), needy);
}

TEST_F(ServiceTest, LostWorkerIsRetriedOnAnotherWorker) {
  CoordinatorOptions options;
  options.lease_seconds = 1;
  Start(options);
  const std::string id = MustSubmit(Spec("fragile"));
  const std::string doomed = worker_->MustRegister("doomed");
  v1::Assignment a = worker_->MustGetAssignment(doomed);
  v1::ReportProgressResponse r;
  ASSERT_TRUE(worker_->Report(doomed, a, 5, &r, "runs/fragile/step-5").ok());
  const std::string healthy = worker_->MustRegister("healthy");
  std::atomic<bool> stop{false};
  std::thread heartbeats([&] {
    while (!stop) {
      v1::HeartbeatResponse beat;
      worker_->Heartbeat(healthy, &beat);
      absl::SleepFor(absl::Milliseconds(200));
    }
  });
  // `doomed` stops calling in: after the lease its attempt fails and the job
  // moves to `healthy`, resuming from the checkpoint.
  v1::Assignment retry = worker_->MustGetAssignment(healthy, 10);
  stop = true;
  heartbeats.join();
  EXPECT_EQ(retry.job_id(), id);
  EXPECT_EQ(retry.attempt(), 2);
  v1::Job job = client_->MustGet(id);
  EXPECT_EQ(job.failure_class(), v1::FAILURE_CLASS_LOST_WORKER);
  EXPECT_EQ(job.last_checkpoint(), "runs/fragile/step-5");
  v1::JobEventsResponse events;
  ASSERT_TRUE(client_->Events(id, &events).ok());
  bool saw_retry = false;
  for (const v1::JobEvent& e : events.events()) {
    if (e.to_state() != v1::JOB_STATE_RETRYING) continue;
    saw_retry = true;
    EXPECT_EQ(e.reason().rfind("attempt 1 failed: worker " + doomed +
                                   " (rank 0) lost: no "
                                   "heartbeat for ",
                               0),
              0u)
        << e.reason();
    EXPECT_NE(e.reason().find("restarting (restart 1 of 3) from checkpoint runs/fragile/step-5"),
              std::string::npos)
        << e.reason();
  }
  EXPECT_TRUE(saw_retry);
  // The lost worker is told to register again; its old reports are refused.
  v1::HeartbeatResponse beat;
  ASSERT_TRUE(worker_->Heartbeat(doomed, &beat).ok());
  EXPECT_FALSE(beat.registered());
  EXPECT_EQ(worker_->Report(doomed, a, 6, &r).error_code(), StatusCode::NOT_FOUND);
  ASSERT_TRUE(worker_->Report(healthy, retry, 6, &r).ok());
  ASSERT_TRUE(worker_->Finish(healthy, retry, v1::OUTCOME_SUCCEEDED).ok());
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(ServiceTest, StalledAttemptIsRetried) {
  CoordinatorOptions options;
  options.stall_seconds = 1;
  Start(options);
  const std::string id = MustSubmit(Spec("sleepy"));
  const std::string w = worker_->MustRegister("host");
  v1::Assignment a = worker_->MustGetAssignment(w);
  v1::ReportProgressResponse r;
  ASSERT_TRUE(worker_->Report(w, a, 1, &r).ok());
  ASSERT_TRUE(WaitFor([&] {
    return client_->MustGet(id).attempt() == 1 &&
           client_->MustGet(id).state() == v1::JOB_STATE_PENDING;
  }));
  v1::Job job = client_->MustGet(id);
  EXPECT_EQ(job.failure_class(), v1::FAILURE_CLASS_STALLED);
  // The worker still holds the stalled attempt: it is told to stop, and
  // asking for work lets go of it and picks up the retry.
  EXPECT_EQ(job.reason(), "needs 1 idle cpu worker; 0 idle (1 busy, 0 too small)");
  v1::HeartbeatResponse beat;
  ASSERT_TRUE(worker_->Heartbeat(w, &beat).ok());
  ASSERT_EQ(beat.stop_attempts_size(), 1);
  EXPECT_EQ(worker_->Report(w, a, 2, &r).error_code(), StatusCode::ABORTED);
  v1::Assignment retry = worker_->MustGetAssignment(w);
  EXPECT_EQ(retry.attempt(), 2);
}

TEST_F(ServiceTest, RendezvousSetGetWait) {
  Start();
  worker_->MustRegister("a");
  worker_->MustRegister("b");
  const std::string id = MustSubmit(Spec("pair", 2));
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(client_->ListWorkers(&workers).ok());
  v1::Assignment a = worker_->MustGetAssignment(workers.workers(0).id());
  const std::string scope = a.rendezvous_scope();
  auto& kv = worker_->rendezvous();

  v1::SetKeyRequest set;
  set.set_scope(scope);
  set.set_key("rank0");
  set.set_value(std::string("\x00\x01nccl-id", 9));
  v1::SetKeyResponse set_response;
  ASSERT_TRUE(kv.Set(worker_->Context().get(), set, &set_response).ok());
  v1::GetKeyRequest get;
  get.set_scope(scope);
  get.set_key("rank0");
  v1::GetKeyResponse got;
  ASSERT_TRUE(kv.Get(worker_->Context().get(), get, &got).ok());
  EXPECT_TRUE(got.found());
  EXPECT_EQ(got.value(), std::string("\x00\x01nccl-id", 9));
  get.set_key("rank1");
  ASSERT_TRUE(kv.Get(worker_->Context().get(), get, &got).ok());
  EXPECT_FALSE(got.found());

  v1::WaitKeysRequest wait;
  wait.set_scope(scope);
  wait.add_keys("rank0");
  wait.add_keys("rank1");
  wait.set_timeout_ms(100);
  v1::WaitKeysResponse ready;
  ASSERT_TRUE(kv.Wait(worker_->Context().get(), wait, &ready).ok());
  EXPECT_FALSE(ready.ready());
  wait.set_timeout_ms(10000);
  absl::Time waited_at;
  std::thread waiter([&] {
    v1::WaitKeysResponse response;
    EXPECT_TRUE(kv.Wait(worker_->Context().get(), wait, &response).ok());
    EXPECT_TRUE(response.ready());
    waited_at = absl::Now();
  });
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time set_at = absl::Now();
  set.set_key("rank1");
  ASSERT_TRUE(kv.Set(worker_->Context().get(), set, &set_response).ok());
  waiter.join();
  EXPECT_LT(waited_at - set_at, absl::Seconds(1));

  // Scopes must name a running attempt.
  set.set_scope("nope/1");
  grpc::Status status = kv.Set(worker_->Context().get(), set, &set_response);
  EXPECT_EQ(status.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "scope nope/1: no job nope");
  set.set_scope("garbage");
  status = kv.Set(worker_->Context().get(), set, &set_response);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "scope: must be \"<job>/<attempt>\" as given in the assignment (got \"garbage\")");
  set.set_scope(id + "/2");
  status = kv.Set(worker_->Context().get(), set, &set_response);
  EXPECT_EQ(status.error_code(), StatusCode::ABORTED);
  v1::Job cancelled;
  ASSERT_TRUE(client_->Cancel(id, &cancelled).ok());
  get.set_scope(scope);
  status = kv.Get(worker_->Context().get(), get, &got);
  EXPECT_EQ(status.error_code(), StatusCode::ABORTED);
  EXPECT_EQ(status.error_message(), "scope " + scope + ": attempt 1 of job " + id +
                                        " is not running (the job is CANCELLED, attempt 1)");
}

TEST_F(ServiceTest, WorkerReRegistersWithItsId) {
  Start();
  const std::string w = worker_->MustRegister("host");
  const std::string id = MustSubmit(Spec("kept"));
  v1::Assignment a = worker_->MustGetAssignment(w);
  v1::RegisterWorkerResponse again;
  ASSERT_TRUE(worker_->Register("host", int64_t{16} << 30, &again, w).ok());
  EXPECT_EQ(again.worker_id(), w);
  EXPECT_EQ(again.lease_seconds(), 15);
  EXPECT_EQ(again.heartbeat_seconds(), 5);
  v1::ReportProgressResponse r;
  ASSERT_TRUE(worker_->Report(w, a, 1, &r).ok());
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_RUNNING);
}

}  // namespace
}  // namespace sbp::server::testing
