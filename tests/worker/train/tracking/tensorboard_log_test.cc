// The event-file writer: CRC-32C against its published check value, the record
// framing read back field by field, the version and session-start records,
// every number of a metrics line as a scalar (nested objects as "a/b"), one
// new file per log, and errors that name the path.
#include "worker/train/tracking/tensorboard_log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tensorboard/event.pb.h"
#include "tests/worker/train/test_util.h"
#include "worker/train/tracking/crc32c.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

uint64_t ReadLittleEndian(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
  return v;
}

// Every record of an event file, each CRC checked.
std::vector<tensorboard::Event> ReadEvents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  std::vector<tensorboard::Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size());
    const uint64_t length = ReadLittleEndian(bytes, at, 8);
    EXPECT_EQ(ReadLittleEndian(bytes, at + 8, 4), MaskedCrc32c(bytes.substr(at, 8)));
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(ReadLittleEndian(bytes, at + 12 + length, 4), MaskedCrc32c(data));
    tensorboard::Event event;
    EXPECT_TRUE(event.ParseFromString(data));
    events.push_back(event);
    at += 12 + length + 4;
  }
  return events;
}

TEST(Crc32cTest, MatchesTheCheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  const uint32_t crc = Crc32c("123456789");
  EXPECT_EQ(MaskedCrc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

class TensorBoardLogTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = train_testing::MakeTempDir("tensorboard_log"); }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_;
};

TEST_F(TensorBoardLogTest, WritesVersionSessionStartAndEveryNumber) {
  std::string path;
  {
    auto log = TensorBoardLog::Open(root_ + "/run/tb", 5, 1700000000.5);
    ASSERT_TRUE(log.ok()) << log.status();
    path = log->path();
    EXPECT_NE(fs::path(path).filename().string().find("events.out.tfevents.1700000000."),
              std::string::npos)
        << path;
    const nlohmann::json line = {{"step", 5},
                                 {"loss", 2.5},
                                 {"tokens", 1234},
                                 {"time", "2026-12-05T10:00:00.000Z"},
                                 {"tier", {{"host_bytes", 7}}},
                                 {"offload", true}};
    ASSERT_TRUE(log->AppendScalars(5, 1700000001.0, line).ok());
    ASSERT_TRUE(log->AppendScalars(6, 1700000002.0, {{"step", 6}, {"loss", 2.25}}).ok());
  }
  const std::vector<tensorboard::Event> events = ReadEvents(path);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_DOUBLE_EQ(events[0].wall_time(), 1700000000.5);
  EXPECT_EQ(events[1].session_log().status(), tensorboard::SessionLog::START);
  EXPECT_EQ(events[1].step(), 5);
  std::map<std::string, float> scalars;
  for (const auto& v : events[2].summary().value()) scalars[v.tag()] = v.simple_value();
  // Numbers only; the step is the event's own; nested objects flatten.
  EXPECT_EQ(scalars, (std::map<std::string, float>{
                         {"loss", 2.5f}, {"tokens", 1234.0f}, {"tier/host_bytes", 7.0f}}));
  EXPECT_EQ(events[2].step(), 5);
  EXPECT_DOUBLE_EQ(events[2].wall_time(), 1700000001.0);
  EXPECT_EQ(events[3].step(), 6);
  ASSERT_EQ(events[3].summary().value_size(), 1);
  EXPECT_EQ(events[3].summary().value(0).simple_value(), 2.25f);
}

TEST_F(TensorBoardLogTest, EachLogIsANewFile) {
  auto first = TensorBoardLog::Open(root_ + "/tb", 1, 1700000000.0);
  auto second = TensorBoardLog::Open(root_ + "/tb", 3, 1700000000.0);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(first->path(), second->path());
  EXPECT_EQ(std::distance(fs::directory_iterator(root_ + "/tb"), fs::directory_iterator()), 2);
}

TEST_F(TensorBoardLogTest, AnUnwritableDirectoryIsAnErrorNamingIt) {
  const std::string blocked = root_ + "/blocked";
  std::ofstream(blocked) << "a file where the directory would go";
  auto log = TensorBoardLog::Open(blocked + "/tb", 1, 1700000000.0);
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.status().message().find(blocked), std::string::npos) << log.status();
}

}  // namespace
}  // namespace sbp
