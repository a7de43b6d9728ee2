// A watched pending job's reason reaches its watchers within a timer tick or
// two, however long the queue: the scheduler refreshes the reasons of watched
// jobs on every pass and stores them first. Here 5,000 jobs queue ahead of
// the watched one; a worker's arrival changes every reason, and the walk over
// the queue with the batched writes would take tens of seconds to get to the
// watched job by itself.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/store.h"
#include "tests/server/coordinator_fixture.h"
#include "worker/train/job_spec.h"

namespace sbp::server::testing {
namespace {

// `jobs` PENDING jobs written into a fresh database, as a coordinator would
// have left them.
void Prefill(const std::string& db, int jobs) {
  auto store = Store::Open(db);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<JobSpec> spec = ParseJobSpec(Spec("queued"), "spec");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto tx = (*store)->Begin();
  ASSERT_TRUE(tx.ok()) << tx.status();
  const absl::Time now = absl::Now();
  for (int i = 0; i < jobs; ++i) {
    JobRecord job;
    job.id = absl::StrCat("queued-", i);
    job.name = "queued";
    job.spec_yaml = Spec("queued");
    job.spec_json = JobSpecToJson(*spec);
    job.state = JobState::kPending;
    job.reason = "no cpu workers registered";
    job.created_at = job.updated_at = job.queued_at = now;
    ASSERT_TRUE((*store)->InsertJob(job).ok());
  }
  ASSERT_TRUE(tx->Commit().ok());
}

class WatchedReasonTest : public CoordinatorTest {};

TEST_F(WatchedReasonTest, FollowsTheClusterAtTheEndOfALongQueue) {
  dir_ = FreshDir("watched_reason").string();
  Prefill(dir_ + "/coordinator.db", 5000);
  Start();
  const std::string id = MustSubmit(Spec("watched"));

  std::mutex mu;
  std::vector<std::string> reasons;
  std::thread watcher([&] {
    auto context = client_->Context(absl::Seconds(30));
    v1::WatchJobRequest request;
    request.set_id(id);
    auto reader = client_->jobs().Watch(context.get(), request);
    v1::JobUpdate update;
    while (reader->Read(&update)) {
      std::lock_guard<std::mutex> lock(mu);
      reasons.push_back(update.job().reason());
      if (update.job().reason() != "no cpu workers registered") context->TryCancel();
    }
  });
  auto seen = [&](auto predicate) {
    std::lock_guard<std::mutex> lock(mu);
    for (const std::string& r : reasons) {
      if (predicate(r)) return true;
    }
    return false;
  };
  ASSERT_TRUE(WaitFor([&] { return seen([](const std::string&) { return true; }); }));

  // One worker: the first queued job runs, and every other job now waits
  // for an idle worker instead of for any worker at all.
  worker_->MustRegister("host");
  const absl::Time changed = absl::Now();
  const bool followed = WaitFor(
      [&] { return seen([](const std::string& r) { return r != "no cpu workers registered"; }); },
      absl::Seconds(3));
  const absl::Duration took = absl::Now() - changed;
  watcher.join();
  ASSERT_TRUE(followed) << "the watcher saw no new reason within 3 s";
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(reasons.back(), "needs 1 idle cpu worker; 0 idle (1 busy, 0 too small)");
  EXPECT_EQ(client_->MustGet(id).reason(), reasons.back());
  RecordProperty("seconds", absl::StrCat(absl::ToDoubleSeconds(took)));
}

}  // namespace
}  // namespace sbp::server::testing
