#include "worker/agent/output_shipper.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

namespace sbp {
namespace {

// A coordinator's view: each kind's lines by number (a retried batch
// overwrites the same numbers); fails the first `failures` calls with
// `failure`.
struct Receiver {
  absl::Mutex mu;
  std::map<int64_t, std::string> metrics, logs;
  int calls = 0;
  int failures = 0;
  absl::Status failure = absl::UnavailableError("coordinator down");
  absl::Status Receive(const OutputShipper::Batch& batch) {
    absl::MutexLock lock(&mu);
    ++calls;
    if (failures > 0) {
      --failures;
      return failure;
    }
    for (size_t i = 0; i < batch.metrics.size(); ++i) {
      metrics[batch.metrics_first + static_cast<int64_t>(i)] = batch.metrics[i];
    }
    for (size_t i = 0; i < batch.logs.size(); ++i) {
      logs[batch.logs_first + static_cast<int64_t>(i)] = batch.logs[i];
    }
    return absl::OkStatus();
  }
};

TEST(OutputShipperTest, NumbersEachKindsLinesAndDeliversThemAll) {
  Receiver receiver;
  OutputShipper shipper([&](const OutputShipper::Batch& b) { return receiver.Receive(b); });
  for (int i = 0; i < 2500; ++i) shipper.PostMetrics("{\"step\":" + std::to_string(i + 1) + "}");
  shipper.Send(LogLevel::kInfo, "one\ntwo");  // a message of two lines
  ASSERT_TRUE(shipper.Flush(absl::Seconds(20)));
  absl::MutexLock lock(&receiver.mu);
  ASSERT_EQ(receiver.metrics.size(), 2500u);
  EXPECT_EQ(receiver.metrics.at(2499), "{\"step\":2500}");
  ASSERT_EQ(receiver.logs.size(), 2u);
  EXPECT_EQ(receiver.logs.at(0), "one");
  EXPECT_EQ(receiver.logs.at(1), "two");
  EXPECT_LE(receiver.calls, 10);  // in batches, not a call per line
}

TEST(OutputShipperTest, RetriesTheSameNumbersUntilTheCoordinatorIsBack) {
  Receiver receiver;
  receiver.failures = 3;
  OutputShipper shipper([&](const OutputShipper::Batch& b) { return receiver.Receive(b); });
  shipper.Send(LogLevel::kInfo, "a");
  shipper.Send(LogLevel::kInfo, "b");
  ASSERT_TRUE(shipper.Flush(absl::Seconds(20)));
  absl::MutexLock lock(&receiver.mu);
  EXPECT_EQ(receiver.logs, (std::map<int64_t, std::string>{{0, "a"}, {1, "b"}}));
  EXPECT_GE(receiver.calls, 4);
}

TEST(OutputShipperTest, StopsWhenTheAttemptIsOverAtTheCoordinator) {
  Receiver receiver;
  receiver.failures = 1000;
  receiver.failure = absl::AbortedError("attempt 1 is over");
  OutputShipper shipper([&](const OutputShipper::Batch& b) { return receiver.Receive(b); });
  shipper.Send(LogLevel::kInfo, "a");
  EXPECT_FALSE(shipper.Flush(absl::Seconds(20)));
  shipper.Send(LogLevel::kInfo, "b");
  EXPECT_FALSE(shipper.Flush(absl::Seconds(1)));
  absl::MutexLock lock(&receiver.mu);
  EXPECT_EQ(receiver.calls, 1);
}

TEST(OutputShipperTest, CapturesOnlyTheLinesOfItsThreadAsValidUtf8) {
  Receiver receiver;
  OutputShipper shipper([&](const OutputShipper::Batch& b) { return receiver.Receive(b); });
  {
    ScopedLogSink capture(&shipper);
    LOG(INFO) << "mine \xff\xfe bytes";
    std::thread other([] { LOG(INFO) << "another job's line"; });
    other.join();
  }
  LOG(INFO) << "after the job";
  ASSERT_TRUE(shipper.Flush(absl::Seconds(20)));
  absl::MutexLock lock(&receiver.mu);
  ASSERT_EQ(receiver.logs.size(), 1u);
  EXPECT_NE(receiver.logs.at(0).find("mine ?? bytes"), std::string::npos) << receiver.logs.at(0);
  EXPECT_NE(receiver.logs.at(0).find("output_shipper_test.cc"), std::string::npos);
}

TEST(OutputShipperTest, CutsLongLogLinesAndSkipsOverlongMetricsLines) {
  Receiver receiver;
  OutputShipper shipper([&](const OutputShipper::Batch& b) { return receiver.Receive(b); });
  shipper.Send(LogLevel::kInfo, std::string(100000, 'x'));
  shipper.PostMetrics(std::string(OutputShipper::kMaxMetricsLineBytes + 1, '1'));
  shipper.PostMetrics("{\"step\":2}");
  ASSERT_TRUE(shipper.Flush(absl::Seconds(20)));
  absl::MutexLock lock(&receiver.mu);
  ASSERT_EQ(receiver.logs.size(), 1u);
  EXPECT_LE(receiver.logs.at(0).size(), OutputShipper::kMaxLineBytes + 16);
  // The skipped line keeps its number: the coordinator counts the gap.
  EXPECT_EQ(receiver.metrics, (std::map<int64_t, std::string>{{1, "{\"step\":2}"}}));
}

}  // namespace
}  // namespace sbp
