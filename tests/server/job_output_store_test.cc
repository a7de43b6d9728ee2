// The coordinator's store of job output (server/job_output.h): lines kept in
// order per attempt and rank, retried batches stored once, the caps (metrics
// thinned evenly, logs keeping their first tenth and the newest), reading in
// pages, and retention taking the output with its job.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/store.h"
#include "tests/server/test_util.h"

namespace sbp::server {
namespace {

using ::sbp::server::testing::FreshDir;

std::unique_ptr<Store> MustOpen(const std::string& name) {
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open((FreshDir(name) / "coordinator.db").string());
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

OutputBatch Batch(OutputKind kind, int attempt, int rank, int64_t first, int count) {
  OutputBatch batch;
  batch.job_id = "job-1";
  batch.attempt = attempt;
  batch.rank = rank;
  batch.kind = kind;
  batch.first = first;
  for (int64_t n = first; n < first + count; ++n) {
    batch.lines.push_back(kind == OutputKind::kMetrics
                              ? absl::StrCat(R"({"step":)", n + 1, R"(,"loss":1.5})")
                              : absl::StrCat("line ", n));
    if (kind == OutputKind::kMetrics) batch.steps.push_back(n + 1);
  }
  return batch;
}

std::vector<OutputLine> ReadAll(Store& store, OutputKind kind, int attempt = 0,
                                int64_t from_step = 0) {
  std::vector<OutputLine> out;
  OutputQuery query{"job-1", kind, attempt, 0, from_step, 7};
  while (true) {
    absl::StatusOr<OutputPage> page = store.ReadOutput(query);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    for (OutputLine& line : page->lines) out.push_back(std::move(line));
    if (!page->more) break;
    query.after_cursor = out.back().cursor;
  }
  return out;
}

const OutputCaps kLarge{1000000, int64_t{1} << 30};

TEST(JobOutputStoreTest, KeepsLinesInOrderAndStoresARetriedBatchOnce) {
  auto store = MustOpen("output_order");
  ASSERT_NE(store, nullptr);
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  ASSERT_TRUE(store
                  ->AppendOutput({Batch(OutputKind::kMetrics, 1, 0, 0, 20),
                                  Batch(OutputKind::kLogs, 1, 0, 0, 5)},
                                 kLarge, kLarge, now)
                  .ok());
  // The same batch again (a lost answer), then one overlapping it.
  ASSERT_TRUE(
      store->AppendOutput({Batch(OutputKind::kMetrics, 1, 0, 0, 20)}, kLarge, kLarge, now).ok());
  ASSERT_TRUE(
      store->AppendOutput({Batch(OutputKind::kMetrics, 1, 0, 15, 10)}, kLarge, kLarge, now).ok());
  const std::vector<OutputLine> metrics = ReadAll(*store, OutputKind::kMetrics);
  ASSERT_EQ(metrics.size(), 25u);
  for (size_t i = 0; i < metrics.size(); ++i) {
    EXPECT_EQ(metrics[i].text, absl::StrCat(R"({"step":)", i + 1, R"(,"loss":1.5})"));
    EXPECT_EQ(metrics[i].attempt, 1);
    EXPECT_EQ(metrics[i].time, now);
    if (i > 0) {
      EXPECT_GT(metrics[i].cursor, metrics[i - 1].cursor);
    }
  }
  EXPECT_EQ(ReadAll(*store, OutputKind::kLogs).size(), 5u);
  EXPECT_EQ(ReadAll(*store, OutputKind::kMetrics, 0, 21).size(), 5u);  // steps 21..25

  // A second attempt: read alone or after the first.
  ASSERT_TRUE(
      store->AppendOutput({Batch(OutputKind::kMetrics, 2, 0, 0, 3)}, kLarge, kLarge, now).ok());
  EXPECT_EQ(ReadAll(*store, OutputKind::kMetrics, 2).size(), 3u);
  EXPECT_EQ(ReadAll(*store, OutputKind::kMetrics).size(), 28u);
  const std::vector<OutputSummary> summaries =
      *store->OutputSummaries("job-1", OutputKind::kMetrics, 0);
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[0].lines, 25);
  EXPECT_EQ(summaries[0].next_line, 25);
  EXPECT_EQ(summaries[0].dropped, 0);
  EXPECT_EQ(summaries[1].attempt, 2);
}

TEST(JobOutputStoreTest, AGapInTheNumbersCountsAsDropped) {
  auto store = MustOpen("output_gap");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store
                  ->AppendOutput(
                      {Batch(OutputKind::kLogs, 1, 1, 0, 3), Batch(OutputKind::kLogs, 1, 1, 10, 2)},
                      kLarge, kLarge, absl::Now())
                  .ok());
  const std::vector<OutputSummary> s = *store->OutputSummaries("job-1", OutputKind::kLogs, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].rank, 1);
  EXPECT_EQ(s[0].lines, 5);
  EXPECT_EQ(s[0].dropped, 7);
}

TEST(JobOutputStoreTest, MetricsOverTheCapAreThinnedEvenly) {
  auto store = MustOpen("output_thin");
  ASSERT_NE(store, nullptr);
  const OutputCaps caps{10, int64_t{1} << 30};
  for (int first = 0; first < 100; first += 7) {
    ASSERT_TRUE(
        store
            ->AppendOutput({Batch(OutputKind::kMetrics, 1, 0, first, std::min(7, 100 - first))},
                           caps, kLarge, absl::Now())
            .ok());
  }
  const std::vector<OutputLine> kept = ReadAll(*store, OutputKind::kMetrics);
  const OutputSummary s = store->OutputSummaries("job-1", OutputKind::kMetrics, 1)->front();
  // 100 lines under a cap of 10: every 16th is kept, from the first on.
  EXPECT_EQ(s.stride, 16);
  ASSERT_EQ(kept.size(), 7u);
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(kept[i].text, absl::StrCat(R"({"step":)", 16 * i + 1, R"(,"loss":1.5})"));
  }
  EXPECT_EQ(s.lines, 7);
  EXPECT_EQ(s.dropped, 93);
  EXPECT_LE(s.lines, caps.max_lines);
}

TEST(JobOutputStoreTest, LogsOverTheCapKeepTheFirstTenthAndTheNewest) {
  auto store = MustOpen("output_logs_cap");
  ASSERT_NE(store, nullptr);
  const OutputCaps caps{20, int64_t{1} << 30};
  for (int first = 0; first < 100; first += 10) {
    ASSERT_TRUE(
        store->AppendOutput({Batch(OutputKind::kLogs, 1, 0, first, 10)}, kLarge, caps, absl::Now())
            .ok());
  }
  const std::vector<OutputLine> kept = ReadAll(*store, OutputKind::kLogs);
  ASSERT_LE(kept.size(), 20u);
  ASSERT_GE(kept.size(), 18u);
  EXPECT_EQ(kept[0].text, "line 0");
  EXPECT_EQ(kept[1].text, "line 1");
  EXPECT_EQ(kept.back().text, "line 99");
  // The newest lines run without a gap up to the last one.
  for (size_t i = 2; i < kept.size(); ++i) {
    EXPECT_EQ(kept[i].text, absl::StrCat("line ", 100 - kept.size() + i));
  }
  const OutputSummary s = store->OutputSummaries("job-1", OutputKind::kLogs, 1)->front();
  EXPECT_EQ(s.lines + s.dropped, 100);
}

TEST(JobOutputStoreTest, TheByteCapHoldsToo) {
  auto store = MustOpen("output_bytes_cap");
  ASSERT_NE(store, nullptr);
  OutputBatch batch = Batch(OutputKind::kLogs, 1, 0, 0, 0);
  for (int i = 0; i < 200; ++i) batch.lines.push_back(std::string(1000, 'a' + i % 26));
  const OutputCaps caps{1000000, 50000};
  ASSERT_TRUE(store->AppendOutput({batch}, kLarge, caps, absl::Now()).ok());
  const OutputSummary s = store->OutputSummaries("job-1", OutputKind::kLogs, 1)->front();
  EXPECT_LE(s.bytes, 50000);
  EXPECT_GT(s.lines, 0);
  EXPECT_EQ(s.lines + s.dropped, 200);
}

TEST(JobOutputStoreTest, PagesStopAtAboutAMegabyte) {
  auto store = MustOpen("output_pages");
  ASSERT_NE(store, nullptr);
  OutputBatch batch = Batch(OutputKind::kLogs, 1, 0, 0, 0);
  for (int i = 0; i < 40; ++i) batch.lines.push_back(std::string(60000, 'x'));
  ASSERT_TRUE(store->AppendOutput({batch}, kLarge, kLarge, absl::Now()).ok());
  const OutputPage page = *store->ReadOutput({"job-1", OutputKind::kLogs, 0, 0, 0, 500});
  EXPECT_TRUE(page.more);
  EXPECT_LT(page.lines.size(), 40u);
  EXPECT_EQ(ReadAll(*store, OutputKind::kLogs).size(), 40u);
}

TEST(JobOutputStoreTest, RetentionRemovesAJobsOutputWithIt) {
  auto store = MustOpen("output_retention");
  ASSERT_NE(store, nullptr);
  JobRecord job;
  job.id = "job-1";
  job.name = "tiny";
  job.spec_yaml = "name: tiny\n";
  job.spec_json = R"({"name":"tiny"})";
  job.state = JobState::kSucceeded;
  job.owner = "alice";
  job.finished_at = absl::FromUnixSeconds(1000);
  ASSERT_TRUE(store->InsertJob(job).ok());
  ASSERT_TRUE(store
                  ->AppendOutput({Batch(OutputKind::kMetrics, 1, 0, 0, 5),
                                  Batch(OutputKind::kLogs, 1, 0, 0, 5)},
                                 kLarge, kLarge, absl::Now())
                  .ok());
  ASSERT_EQ(store->RemoveEndedJobs(absl::FromUnixSeconds(2000), 0, 10)->size(), 1u);
  EXPECT_TRUE(ReadAll(*store, OutputKind::kMetrics).empty());
  EXPECT_TRUE(ReadAll(*store, OutputKind::kLogs).empty());
  EXPECT_TRUE(store->OutputSummaries("job-1", OutputKind::kLogs, 0)->empty());
}

}  // namespace
}  // namespace sbp::server
