#include "server/store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/server/test_util.h"

namespace sbp::server {
namespace {

using ::sbp::server::testing::FreshDir;

absl::Time Ms(int64_t ms) { return absl::FromUnixMillis(ms); }

JobRecord MakeJob(const std::string& id, const std::string& request_id = "") {
  JobRecord job;
  job.id = id;
  job.name = "tiny";
  job.spec_yaml = "name: tiny\n";
  job.spec_json = R"({"name":"tiny"})";
  job.state = JobState::kPending;
  job.reason = "submitted";
  job.max_restarts = 3;
  job.world_size = 2;
  job.required_memory_bytes = int64_t{9} << 30;
  job.request_id = request_id;
  job.revision = 1;
  job.last_event_sequence = 1;
  job.created_at = Ms(1700000000123);
  job.updated_at = Ms(1700000000123);
  job.queued_at = Ms(1700000000123);
  return job;
}

JobEventRecord MakeEvent(const std::string& job_id, int64_t sequence, JobState from, JobState to) {
  JobEventRecord e;
  e.job_id = job_id;
  e.sequence = sequence;
  e.time = Ms(1700000000000 + sequence);
  e.from_state = from;
  e.to_state = to;
  e.attempt = 1;
  e.reason = absl::StrCat("reason ", sequence);
  return e;
}

std::unique_ptr<Store> MustOpen(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

// Inserts a job and its first event in one transaction.
absl::Status Submit(Store& store, const JobRecord& job) {
  absl::StatusOr<sqlite::Transaction> tx = store.Begin();
  if (!tx.ok()) return tx.status();
  absl::StatusOr<int64_t> seq = store.InsertJob(job);
  if (!seq.ok()) return seq.status();
  absl::Status status =
      store.AppendEvent(MakeEvent(job.id, 1, JobState::kUnspecified, JobState::kPending));
  if (!status.ok()) return status;
  return tx->Commit();
}

TEST(StoreTest, MigratesANewAndAnEmptyFile) {
  const auto dir = FreshDir("store_migrate");
  auto store = MustOpen((dir / "new.db").string());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->SchemaVersion(), Store::kSchemaVersion);

  const std::string empty = (dir / "empty.db").string();
  std::FILE* f = std::fopen(empty.c_str(), "w");
  std::fclose(f);
  auto from_empty = MustOpen(empty);
  ASSERT_NE(from_empty, nullptr);
  EXPECT_EQ(*from_empty->SchemaVersion(), Store::kSchemaVersion);
  EXPECT_TRUE(from_empty->ListJobs({}, 0, 10)->empty());

  // The journal is WAL on disk.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(empty.c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "wal");
  sqlite3_finalize(stmt);
  sqlite3_close(raw);
}

TEST(StoreTest, RefusesANewerSchemaAndGarbage) {
  const auto dir = FreshDir("store_newer");
  const std::string path = (dir / "c.db").string();
  { ASSERT_NE(MustOpen(path), nullptr); }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(raw, "INSERT INTO schema_version VALUES (99, 0)", nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(raw);
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("schema version 99"), std::string::npos)
      << store.status();

  const std::string garbage = (dir / "garbage.db").string();
  std::FILE* f = std::fopen(garbage.c_str(), "w");
  std::fputs("this is not a database, just some text that is long enough to look like a header", f);
  std::fclose(f);
  store = Store::Open(garbage);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(garbage), std::string::npos) << store.status();
}

TEST(StoreTest, JobRoundTripAndPersistence) {
  const auto dir = FreshDir("store_roundtrip");
  const std::string path = (dir / "c.db").string();
  JobRecord job = MakeJob("tiny-abc123", "req-1");
  job.state = JobState::kRunning;
  job.attempt = 2;
  job.failure_class = FailureClass::kLostWorker;
  job.last_checkpoint = "runs/tiny/step-50";
  job.worker_ids = {"w-1", "w-2"};
  job.device = DeviceKind::kCuda;
  job.priority = -5;
  job.progress.step = 42;
  job.progress.total_steps = 100;
  job.progress.loss = 2.25;
  job.progress.tokens_per_second = 12345.5;
  job.progress.peak_bytes = int64_t{5} << 30;
  job.progress.eta_seconds = 17.5;
  job.progress.updated_at = Ms(1700000000999);
  job.started_at = Ms(1700000000500);
  job.active_at = Ms(1700000000999);
  job.preemptions = 1;
  job.preempted_by = "urgent-xyz789";
  job.preempt_deadline = Ms(1700000060999);
  // The memory tiers: what it needs beside device memory, and its progress.
  job.required_memory_bytes = int64_t{9} << 30;
  job.required_host_memory_bytes = int64_t{300} << 30;
  job.alternative_needs = {{int64_t{2} << 30, int64_t{400} << 30, 0},
                           {int64_t{2} << 30, 0, int64_t{500} << 30}};
  job.progress.checkpoint_tier = "host";
  job.progress.optimizer_offload = true;
  job.progress.host_tier_bytes = int64_t{3} << 30;
  job.progress.host_tier_peak_bytes = int64_t{4} << 30;
  job.progress.offload_copy_bytes_per_second = 1.5e9;
  job.progress.offload_wait_seconds = 0.25;
  // Online GRPO's rollout figures.
  job.progress.rollout = RolloutProgressRecord{0.42, 0.1, 37.5, 64, 0.05, 400.0, 1.5, 0.5};
  {
    auto store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(Submit(*store, job).ok());
    absl::StatusOr<JobRecord> loaded = store->GetJob(job.id);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    job.seq = loaded->seq;
    EXPECT_GT(job.seq, 0);
    EXPECT_EQ(*loaded, job);
  }
  auto reopened = MustOpen(path);
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(*reopened->GetJob(job.id), job);
  EXPECT_EQ(reopened->GetJob("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reopened->ListEvents(job.id, 0, 10)->size(), 1u);

  job.state = JobState::kSucceeded;
  job.revision = 7;
  job.progress.loss = std::numeric_limits<double>::quiet_NaN();
  job.preemptions = 2;
  job.preempted_by.clear();
  job.preempt_deadline = absl::UnixEpoch();
  ASSERT_TRUE(reopened->UpdateJob(job).ok());
  JobRecord updated = *reopened->GetJob(job.id);
  EXPECT_EQ(updated.state, JobState::kSucceeded);
  EXPECT_EQ(updated.preemptions, 2);
  EXPECT_EQ(updated.preempted_by, "");
  EXPECT_EQ(updated.preempt_deadline, absl::UnixEpoch());
  EXPECT_EQ(updated.revision, 7);
  EXPECT_TRUE(std::isnan(updated.progress.loss));
  ASSERT_TRUE(updated.progress.rollout.has_value());
  EXPECT_EQ(*updated.progress.rollout, *job.progress.rollout);
  EXPECT_EQ(reopened->UpdateJob(MakeJob("missing")).code(), absl::StatusCode::kNotFound);

  // A non-finite rollout figure reads back as NaN; a progress without
  // rollouts (another objective) reads back without them, not as zeros.
  job.progress.rollout->reward_std = std::numeric_limits<double>::infinity();
  ASSERT_TRUE(reopened->UpdateJob(job).ok());
  updated = *reopened->GetJob(job.id);
  ASSERT_TRUE(updated.progress.rollout.has_value());
  EXPECT_TRUE(std::isnan(updated.progress.rollout->reward_std));
  EXPECT_DOUBLE_EQ(updated.progress.rollout->reward_mean, 0.42);
  EXPECT_EQ(updated.progress.rollout->completion_length_max, 64);
  job.progress.rollout.reset();
  ASSERT_TRUE(reopened->UpdateJob(job).ok());
  updated = *reopened->GetJob(job.id);
  EXPECT_FALSE(updated.progress.rollout.has_value());
  EXPECT_EQ(updated.progress.checkpoint_tier, "host");
}

TEST(StoreTest, RequestIdIsUnique) {
  const auto dir = FreshDir("store_request_id");
  auto store = MustOpen((dir / "c.db").string());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Submit(*store, MakeJob("a-1", "req")).ok());
  absl::Status clash = Submit(*store, MakeJob("a-2", "req"));
  EXPECT_EQ(clash.code(), absl::StatusCode::kAlreadyExists) << clash;
  // The failed transaction left nothing behind.
  EXPECT_FALSE(store->FindJob("a-2")->has_value());
  EXPECT_TRUE(store->ListEvents("a-2", 0, 10)->empty());
  // Jobs without a request id do not clash.
  ASSERT_TRUE(Submit(*store, MakeJob("b-1")).ok());
  ASSERT_TRUE(Submit(*store, MakeJob("b-2")).ok());
  std::optional<JobRecord> found = *store->FindJobByRequestId("", "req");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->id, "a-1");
  EXPECT_EQ(found->request_id, "req");
  EXPECT_FALSE(store->FindJobByRequestId("", "other")->has_value());
}

// Each owner has its own request ids: the same id for two owners is two
// jobs, and one owner's lookup never finds the other's.
TEST(StoreTest, RequestIdsAreScopedByOwner) {
  const auto dir = FreshDir("store_request_id_owner");
  auto store = MustOpen((dir / "c.db").string());
  ASSERT_NE(store, nullptr);
  JobRecord alice = MakeJob("a-1", "nightly-1");
  alice.owner = "alice";
  JobRecord bob = MakeJob("b-1", "nightly-1");
  bob.owner = "bob";
  ASSERT_TRUE(Submit(*store, alice).ok());
  ASSERT_TRUE(Submit(*store, bob).ok());
  EXPECT_EQ((*store->FindJobByRequestId("alice", "nightly-1"))->id, "a-1");
  EXPECT_EQ((*store->FindJobByRequestId("bob", "nightly-1"))->id, "b-1");
  EXPECT_EQ((*store->FindJobByRequestId("bob", "nightly-1"))->request_id, "nightly-1");
  EXPECT_FALSE(store->FindJobByRequestId("carol", "nightly-1")->has_value());
  JobRecord again = MakeJob("a-2", "nightly-1");
  again.owner = "alice";
  EXPECT_EQ(Submit(*store, again).code(), absl::StatusCode::kAlreadyExists);
}

// Retention removes ended jobs (with their specs and events) past an age or
// past each owner's newest N, never active ones, in bounded batches.
TEST(StoreTest, RemoveEndedJobsByAgeAndPerOwnerCount) {
  const auto dir = FreshDir("store_retention");
  auto store = MustOpen((dir / "c.db").string());
  ASSERT_NE(store, nullptr);
  auto job = [](const std::string& id, const std::string& owner, JobState state, int64_t ended) {
    JobRecord j = MakeJob(id);
    j.owner = owner;
    j.state = state;
    j.finished_at = Ms(ended);
    return j;
  };
  for (const JobRecord& j : {job("a-old", "alice", JobState::kSucceeded, 1000),
                             job("a-mid", "alice", JobState::kFailed, 2000),
                             job("a-new", "alice", JobState::kCancelled, 3000),
                             job("a-run", "alice", JobState::kRunning, 0),
                             job("b-old", "bob", JobState::kSucceeded, 1000),
                             job("b-pend", "bob", JobState::kPending, 0)}) {
    ASSERT_TRUE(Submit(*store, j).ok()) << j.id;
  }
  const auto bytes = *store->SpecBytesByOwner();
  EXPECT_EQ(bytes.at("alice"), 4 * (11 + 15));
  // Nothing to do without a policy.
  EXPECT_TRUE(store->RemoveEndedJobs(absl::InfinitePast(), 0, 100)->empty());
  // Alice keeps her newest ended job; bob's one ended job stays.
  auto removed = *store->RemoveEndedJobs(absl::InfinitePast(), 1, 100);
  ASSERT_EQ(removed.size(), 2u);
  std::set<std::string> ids;
  for (const auto& r : removed) {
    ids.insert(r.id);
    EXPECT_EQ(r.owner, "alice");
    EXPECT_EQ(r.spec_bytes, 11 + 15);
  }
  EXPECT_EQ(ids, (std::set<std::string>{"a-old", "a-mid"}));
  EXPECT_FALSE(store->FindJob("a-old")->has_value());
  EXPECT_TRUE(store->ListEvents("a-old", 0, 10)->empty());
  EXPECT_TRUE(store->FindJob("a-new")->has_value());
  // By age: everything that ended before t = 2500 ms; active jobs never.
  removed = *store->RemoveEndedJobs(Ms(2500), 0, 100);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].id, "b-old");
  EXPECT_EQ(removed[0].state, JobState::kSucceeded);
  removed = *store->RemoveEndedJobs(Ms(5000), 0, 100);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].id, "a-new");
  for (const char* id : {"a-run", "b-pend"}) EXPECT_TRUE(store->FindJob(id)->has_value()) << id;
  EXPECT_EQ(store->SpecBytesByOwner()->at("alice"), 11 + 15);
}

TEST(StoreTest, UncommittedTransactionRollsBack) {
  const auto dir = FreshDir("store_rollback");
  auto store = MustOpen((dir / "c.db").string());
  ASSERT_NE(store, nullptr);
  {
    auto tx = store->Begin();
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(store->InsertJob(MakeJob("gone")).ok());
  }
  EXPECT_FALSE(store->FindJob("gone")->has_value());
}

TEST(StoreTest, EventsInOrderAfterASequence) {
  const auto dir = FreshDir("store_events");
  auto store = MustOpen((dir / "c.db").string());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Submit(*store, MakeJob("j")).ok());
  const JobState chain[] = {JobState::kPending, JobState::kScheduled, JobState::kRunning,
                            JobState::kSucceeded};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(store->AppendEvent(MakeEvent("j", i + 2, chain[i], chain[i + 1])).ok());
  }
  EXPECT_EQ(store->AppendEvent(MakeEvent("j", 2, chain[0], chain[1])).code(),
            absl::StatusCode::kAlreadyExists);
  std::vector<JobEventRecord> all = *store->ListEvents("j", 0, 100);
  ASSERT_EQ(all.size(), 4u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].sequence, static_cast<int64_t>(i + 1));
  EXPECT_EQ(all[3], MakeEvent("j", 4, JobState::kRunning, JobState::kSucceeded));
  std::vector<JobEventRecord> after = *store->ListEvents("j", 2, 100);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].sequence, 3);
  EXPECT_EQ(store->ListEvents("j", 0, 2)->size(), 2u);
}

TEST(StoreTest, ListsNewestFirstWithFilterAndBound) {
  const auto dir = FreshDir("store_list");
  auto store = MustOpen((dir / "c.db").string());
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 10; ++i) {
    JobRecord job = MakeJob(absl::StrCat("j", i));
    job.state = i % 2 == 0 ? JobState::kPending : JobState::kSucceeded;
    ASSERT_TRUE(Submit(*store, job).ok());
  }
  std::vector<JobRecord> page = *store->ListJobs({}, 0, 3);
  ASSERT_EQ(page.size(), 3u);
  EXPECT_EQ(page[0].id, "j9");
  EXPECT_EQ(page[2].id, "j7");
  std::vector<JobRecord> next = *store->ListJobs({}, page.back().seq, 3);
  EXPECT_EQ(next[0].id, "j6");
  std::vector<JobRecord> pending = *store->ListJobs({JobState::kPending}, 0, 100);
  ASSERT_EQ(pending.size(), 5u);
  EXPECT_EQ(pending[0].id, "j8");
  std::vector<JobRecord> both =
      *store->ListJobs({JobState::kPending, JobState::kSucceeded}, 0, 100);
  EXPECT_EQ(both.size(), 10u);
  std::map<JobState, int64_t> counts = *store->CountJobsByState();
  EXPECT_EQ(counts[JobState::kPending], 5);
  EXPECT_EQ(counts[JobState::kSucceeded], 5);
  std::vector<JobRecord> active = *store->ActiveJobs();
  ASSERT_EQ(active.size(), 5u);
  EXPECT_EQ(active[0].id, "j0");  // oldest first
}

TEST(StoreTest, AssignmentsAndWorkers) {
  const auto dir = FreshDir("store_assignments");
  const std::string path = (dir / "c.db").string();
  {
    auto store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->InsertAssignment({"j", 1, 0, "w-a", true, ""}).ok());
    ASSERT_TRUE(store->InsertAssignment({"j", 1, 1, "w-b", true, ""}).ok());
    ASSERT_TRUE(store->UpdateAssignment({"j", 1, 1, "w-b", false, "SUCCEEDED"}).ok());
    EXPECT_EQ(store->UpdateAssignment({"j", 9, 0, "w-a", false, ""}).code(),
              absl::StatusCode::kNotFound);
    WorkerRecord w;
    w.id = "w-a";
    w.name = "host-a";
    w.device = DeviceKind::kCuda;
    w.memory_bytes = int64_t{80} << 30;
    w.version = "0.1.0";
    w.registered_at = Ms(1700000000000);
    w.last_heartbeat = Ms(1700000001000);
    ASSERT_TRUE(store->UpsertWorker(w).ok());
    w.host_memory_bytes = int64_t{512} << 30;  // re-registered with the memory tiers
    w.offload_disk_bytes = int64_t{2} << 40;
    w.lost = true;
    ASSERT_TRUE(store->UpsertWorker(w).ok());
  }
  auto store = MustOpen(path);
  std::vector<AssignmentRecord> active = *store->ActiveAssignments();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0], (AssignmentRecord{"j", 1, 0, "w-a", true, ""}));
  std::vector<AssignmentRecord> all = *store->Assignments("j", 1);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].outcome, "SUCCEEDED");
  std::vector<WorkerRecord> workers = *store->ListWorkers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_TRUE(workers[0].lost);
  EXPECT_EQ(workers[0].device, DeviceKind::kCuda);
  EXPECT_EQ(workers[0].memory_bytes, int64_t{80} << 30);
  EXPECT_EQ(workers[0].host_memory_bytes, int64_t{512} << 30);
  EXPECT_EQ(workers[0].offload_disk_bytes, int64_t{2} << 40);
  EXPECT_EQ(workers[0].last_heartbeat, Ms(1700000001000));
}

// A child process submits jobs as fast as it can and reports each commit on a
// pipe; SIGKILL it mid-stream. Every reported job must be there, complete
// with its event, and the file must pass an integrity check.
TEST(StoreTest, SurvivesSigkillOfAWriter) {
  const auto dir = FreshDir("store_sigkill");
  const std::string path = (dir / "c.db").string();
  { ASSERT_NE(MustOpen(path), nullptr); }
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    if (!store.ok()) _exit(3);
    for (int i = 0;; ++i) {
      const std::string id = absl::StrCat("job-", i);
      if (!Submit(**store, MakeJob(id, absl::StrCat("req-", i))).ok()) _exit(4);
      const std::string line = id + "\n";
      if (write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(5);
    }
  }
  close(fds[1]);
  std::FILE* in = fdopen(fds[0], "r");
  std::set<std::string> committed;
  char buffer[64];
  while (committed.size() < 40 && std::fgets(buffer, sizeof(buffer), in)) {
    std::string id(buffer);
    id.pop_back();
    committed.insert(id);
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with " << WEXITSTATUS(status);
  while (std::fgets(buffer, sizeof(buffer), in)) {
    std::string id(buffer);
    id.pop_back();
    committed.insert(id);
  }
  std::fclose(in);
  ASSERT_GE(committed.size(), 40u);

  auto store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  for (const std::string& id : committed) {
    std::optional<JobRecord> job = *store->FindJob(id);
    ASSERT_TRUE(job.has_value()) << id << " was committed but is missing";
    EXPECT_EQ(store->ListEvents(id, 0, 10)->size(), 1u) << id;
  }
  // Whatever else is there is whole: every job has its event.
  std::vector<JobRecord> all = *store->ListJobs({}, 0, 100000);
  EXPECT_GE(all.size(), committed.size());
  for (const JobRecord& job : all) EXPECT_EQ(store->ListEvents(job.id, 0, 10)->size(), 1u);
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(raw, "PRAGMA integrity_check", -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "ok");
  sqlite3_finalize(stmt);
  sqlite3_close(raw);
}

// One process at a time per database: a second Store on the same file is
// refused (in this process or another) with a message naming the file, and
// the lock goes with its holder, also when the holder is SIGKILLed.
TEST(StoreTest, SecondOpenOfTheSameFileIsRefused) {
  const auto dir = FreshDir("store_lock");
  const std::string path = (dir / "c.db").string();
  {
    auto first = MustOpen(path);
    ASSERT_NE(first, nullptr);
    absl::StatusOr<std::unique_ptr<Store>> second = Store::Open(path);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(second.status().message(),
              absl::StrCat("the database ", path, " is in use by another sbp-coordinator (pid ",
                           getpid(), "), which holds ", path,
                           ".lock; stop it first, or give this one another --db"));
  }
  // Released with the Store.
  { ASSERT_NE(MustOpen(path), nullptr); }

  // Held by another process until it dies.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    const char byte = store.ok() ? 'y' : 'n';
    if (write(ready[1], &byte, 1) != 1) _exit(3);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  ASSERT_EQ(byte, 'y');
  absl::StatusOr<std::unique_ptr<Store>> refused = Store::Open(path);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(absl::StrCat("(pid ", child, ")")), std::string::npos)
      << refused.status();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_NE(MustOpen(path), nullptr);
}

// The spec is written once: updates (progress, state) leave it alone, and it
// does not live in the row they rewrite, so an update stays a page or two of
// WAL however long the spec is.
TEST(StoreTest, UpdateJobReasonChangesOnlyTheReason) {
  const auto dir = FreshDir("store_reason");
  auto store = MustOpen((dir / "c.db").string());
  ASSERT_NE(store, nullptr);
  JobRecord job = MakeJob("waiting");
  ASSERT_TRUE(Submit(*store, job).ok());
  const JobRecord before = *store->GetJob(job.id);
  ASSERT_TRUE(store->UpdateJobReason(job.id, "needs 2 idle cpu workers", Ms(1700000009000)).ok());
  JobRecord after = *store->GetJob(job.id);
  EXPECT_EQ(after.reason, "needs 2 idle cpu workers");
  EXPECT_EQ(after.revision, before.revision + 1);
  EXPECT_EQ(after.updated_at, Ms(1700000009000));
  after.reason = before.reason;
  after.revision = before.revision;
  after.updated_at = before.updated_at;
  EXPECT_EQ(after, before);
  EXPECT_EQ(store->UpdateJobReason("absent", "x", Ms(1)).code(), absl::StatusCode::kNotFound);
}

TEST(StoreTest, UpdatesDoNotRewriteTheSpec) {
  const auto dir = FreshDir("store_spec");
  const std::string path = (dir / "c.db").string();
  auto store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  JobRecord job = MakeJob("long-spec");
  job.spec_yaml = "name: long-spec\n# " + std::string(60 * 1024, 'x') + "\n";
  job.spec_json = R"({"name":"long-spec"})";
  ASSERT_TRUE(Submit(*store, job).ok());

  JobRecord changed = *store->GetJob(job.id);
  changed.spec_yaml = "name: something else\n";
  changed.spec_json = "{}";
  changed.state = JobState::kRunning;
  ASSERT_TRUE(store->UpdateJob(changed).ok());
  JobRecord loaded = *store->GetJob(job.id);
  EXPECT_EQ(loaded.state, JobState::kRunning);
  EXPECT_EQ(loaded.spec_yaml, job.spec_yaml);
  EXPECT_EQ(loaded.spec_json, job.spec_json);

  const std::string wal = path + "-wal";
  const uintmax_t before = std::filesystem::file_size(wal);
  constexpr int kUpdates = 40;
  for (int step = 1; step <= kUpdates; ++step) {
    absl::StatusOr<sqlite::Transaction> tx = store->Begin();
    ASSERT_TRUE(tx.ok());
    loaded.progress.step = step;
    loaded.revision += 1;
    ASSERT_TRUE(store->UpdateJob(loaded).ok());
    ASSERT_TRUE(tx->Commit().ok());
  }
  const uintmax_t growth = std::filesystem::file_size(wal) - before;
  std::printf("{\"wal_bytes_per_update\": %ju}\n", growth / kUpdates);
  // Rewriting the 60 KiB spec would add at least kUpdates * 60 KiB.
  EXPECT_LT(growth, uintmax_t{kUpdates} * 12 * 1024) << growth << " bytes of WAL";
  EXPECT_EQ(store->GetJob(job.id)->progress.step, kUpdates);
  EXPECT_EQ(store->GetJob(job.id)->spec_yaml, job.spec_yaml);

  // The jobs table has no spec column at all.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(raw, "SELECT count(*) FROM pragma_table_info('jobs') WHERE name LIKE 'spec%'",
                     -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), 0);
  sqlite3_finalize(stmt);
  sqlite3_close(raw);
}

TEST(StoreTest, ListReadsSpecsOnlyWhenAsked) {
  const auto dir = FreshDir("store_list_spec");
  auto store = MustOpen((dir / "c.db").string());
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Submit(*store, MakeJob(absl::StrCat("j", i))).ok());
  std::vector<JobRecord> bare = *store->ListJobs({}, 0, 10, /*with_spec=*/false);
  ASSERT_EQ(bare.size(), 3u);
  for (const JobRecord& job : bare) {
    EXPECT_EQ(job.spec_yaml, "");
    EXPECT_EQ(job.spec_json, "");
    EXPECT_EQ(job.name, "tiny");
  }
  std::vector<JobRecord> full = *store->ListJobs({JobState::kPending}, 0, 10, /*with_spec=*/true);
  ASSERT_EQ(full.size(), 3u);
  for (const JobRecord& job : full) EXPECT_EQ(job.spec_yaml, "name: tiny\n");
}

// A database written by schema 1 (specs inside the jobs row) opens with its
// jobs and their specs intact.
TEST(StoreTest, MigratesSchemaOneSpecsToTheirTable) {
  const auto dir = FreshDir("store_v1");
  const std::string path = (dir / "c.db").string();
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  const char* v1 = R"sql(
CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at_us INTEGER NOT NULL);
INSERT INTO schema_version VALUES (1, 0);
CREATE TABLE jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, name TEXT NOT NULL,
  spec_yaml TEXT NOT NULL, spec_json TEXT NOT NULL, state TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '', attempt INTEGER NOT NULL DEFAULT 0,
  max_restarts INTEGER NOT NULL DEFAULT 0, priority INTEGER NOT NULL DEFAULT 0,
  world_size INTEGER NOT NULL DEFAULT 1, device TEXT NOT NULL DEFAULT 'cpu',
  required_memory_bytes INTEGER NOT NULL DEFAULT 0, request_id TEXT UNIQUE,
  revision INTEGER NOT NULL DEFAULT 0, failure_class TEXT NOT NULL DEFAULT '',
  last_checkpoint TEXT NOT NULL DEFAULT '', progress_step INTEGER NOT NULL DEFAULT 0,
  progress_json TEXT NOT NULL DEFAULT '{}', worker_ids TEXT NOT NULL DEFAULT '[]',
  last_event_sequence INTEGER NOT NULL DEFAULT 0, created_at_us INTEGER NOT NULL DEFAULT 0,
  updated_at_us INTEGER NOT NULL DEFAULT 0, queued_at_us INTEGER NOT NULL DEFAULT 0,
  started_at_us INTEGER NOT NULL DEFAULT 0, finished_at_us INTEGER NOT NULL DEFAULT 0,
  active_at_us INTEGER NOT NULL DEFAULT 0);
CREATE INDEX jobs_by_state ON jobs(state, seq);
CREATE TABLE job_events (job_id TEXT NOT NULL, sequence INTEGER NOT NULL,
  time_us INTEGER NOT NULL, from_state TEXT NOT NULL, to_state TEXT NOT NULL,
  attempt INTEGER NOT NULL, reason TEXT NOT NULL DEFAULT '', message TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, sequence)) WITHOUT ROWID;
CREATE TABLE assignments (job_id TEXT NOT NULL, attempt INTEGER NOT NULL, rank INTEGER NOT NULL,
  worker_id TEXT NOT NULL, active INTEGER NOT NULL DEFAULT 1, outcome TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, attempt, rank)) WITHOUT ROWID;
CREATE INDEX assignments_active ON assignments(active, worker_id);
CREATE TABLE workers (id TEXT PRIMARY KEY, name TEXT NOT NULL, device TEXT NOT NULL,
  memory_bytes INTEGER NOT NULL, version TEXT NOT NULL DEFAULT '',
  registered_at_us INTEGER NOT NULL DEFAULT 0, last_heartbeat_us INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL DEFAULT 'live') WITHOUT ROWID;
INSERT INTO jobs (id, name, spec_yaml, spec_json, state, progress_step, progress_json,
  request_id, required_memory_bytes)
  VALUES ('old-1', 'old', 'name: old' || char(10), '{"name":"old"}', 'RUNNING', 7,
  '{"step":7,"total_steps":10,"loss":2.5,"checkpoint_tier":"host","offload_wait_seconds":0.25}',
  'r-1', 4096);
INSERT INTO workers (id, name, device, memory_bytes) VALUES ('w-old', 'old', 'cpu', 8192);
)sql";
  ASSERT_EQ(sqlite3_exec(raw, v1, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(raw);
  sqlite3_close(raw);

  auto store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->SchemaVersion(), Store::kSchemaVersion);
  JobRecord old = *store->GetJob("old-1");
  EXPECT_EQ(old.spec_yaml, "name: old\n");
  EXPECT_EQ(old.spec_json, R"({"name":"old"})");
  EXPECT_EQ(old.state, JobState::kRunning);
  // Its progress, written before the rollout figures existed: none of them.
  EXPECT_EQ(old.progress.step, 7);
  EXPECT_DOUBLE_EQ(old.progress.loss, 2.5);
  EXPECT_EQ(old.progress.checkpoint_tier, "host");
  EXPECT_DOUBLE_EQ(old.progress.offload_wait_seconds, 0.25);
  EXPECT_FALSE(old.progress.rollout.has_value());
  // Its request id, scoped by its owner ('' before tenancy) since schema 5.
  EXPECT_EQ(old.request_id, "r-1");
  EXPECT_EQ((*store->FindJobByRequestId("", "r-1"))->id, "old-1");
  EXPECT_EQ(store->ActiveJobs()->size(), 1u);
  // Since schema 6: needs nothing of the memory tiers; the worker offers none.
  EXPECT_EQ(old.required_memory_bytes, 4096);
  EXPECT_EQ(old.required_host_memory_bytes, 0);
  EXPECT_EQ(old.required_offload_disk_bytes, 0);
  EXPECT_TRUE(old.alternative_needs.empty());
  std::vector<WorkerRecord> workers = *store->ListWorkers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].memory_bytes, 8192);
  EXPECT_EQ(workers[0].host_memory_bytes, 0);
  EXPECT_EQ(workers[0].offload_disk_bytes, 0);
  ASSERT_TRUE(Submit(*store, MakeJob("new-1")).ok());
  EXPECT_EQ(store->ListJobs({}, 0, 10)->size(), 2u);
}

}  // namespace
}  // namespace sbp::server
