#include "common/input_limits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

class InputLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = absl::StrCat(::testing::TempDir(), "/input-limits-XXXXXX");
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }

  std::string Write(const std::string& name, const std::string& contents) {
    const std::string path = (fs::path(dir_) / name).string();
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }

  fs::path dir_;
};

TEST_F(InputLimitsTest, ReadsRegularFilesUpToTheLimit) {
  const std::string path = Write("a.txt", "hello");
  absl::StatusOr<std::string> text = ReadRegularFile(path, 5, "a test file");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "hello");
  EXPECT_EQ(*ReadRegularFile(Write("empty", ""), 0, "a test file"), "");

  absl::StatusOr<std::string> over = ReadRegularFile(path, 4, "a test file");
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status().message(),
            absl::StrCat(path, ": has 5 bytes, over the 4 bytes limit for a test file"));

  // Through a symlink to a regular file.
  fs::create_symlink(path, dir_ / "link");
  EXPECT_EQ(*ReadRegularFile((dir_ / "link").string(), 5, "a test file"), "hello");
}

TEST_F(InputLimitsTest, MissingFileIsNotFound) {
  const std::string path = (dir_ / "missing.json").string();
  absl::StatusOr<std::string> text = ReadRegularFile(path, 100, "a test file");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(text.status().message(), HasSubstr(path + ": cannot open"));
}

TEST_F(InputLimitsTest, SparseHugeFileIsRefusedBySizeWithoutReading) {
  const std::string path = (dir_ / "sparse").string();
  std::ofstream(path).close();
  fs::resize_file(path, uint64_t{20} << 30);  // 20 GiB of holes
  const auto start = Clock::now();
  absl::StatusOr<std::string> text = ReadRegularFile(path, int64_t{1} << 20, "config.json");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message(),
            absl::StrCat(path, ": has 21474836480 bytes, over the 1 MiB limit for config.json"));
}

TEST_F(InputLimitsTest, FifoDeviceAndDirectoryAreRefusedWithoutBlocking) {
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_symlink("/dev/zero", dir_ / "zero");
  fs::create_directory(dir_ / "dir");
  const struct {
    std::string path;
    std::string type;
  } cases[] = {{fifo, "a FIFO"},
               {(dir_ / "zero").string(), "a character device"},
               {(dir_ / "dir").string(), "a directory"}};
  for (const auto& c : cases) {
    const auto start = Clock::now();
    absl::StatusOr<std::string> text = ReadRegularFile(c.path, int64_t{1} << 20, "config.json");
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(1)) << c.path;
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << c.path;
    EXPECT_EQ(text.status().message(),
              absl::StrCat(c.path, ": is ", c.type,
                           ", not a regular file (only regular files are read)"));
    EXPECT_EQ(RegularFile::Open(c.path, 100, "x").status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(InputLimitsTest, RegularFileReadsInPieces) {
  const std::string path = Write("b.txt", "0123456789");
  absl::StatusOr<RegularFile> file = RegularFile::Open(path, 100, "a test file");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size(), 10);
  char buffer[4];
  EXPECT_EQ(*file->Read(buffer, 4), 4u);
  EXPECT_EQ(std::string(buffer, 4), "0123");
  RegularFile moved = *std::move(file);
  EXPECT_EQ(*moved.ReadAll(), "456789");
  EXPECT_EQ(*moved.Read(buffer, 4), 0u);
}

TEST_F(InputLimitsTest, LimitText) {
  EXPECT_EQ(LimitText(int64_t{1} << 20), "1 MiB");
  EXPECT_EQ(LimitText(int64_t{256} << 10), "256 KiB");
  EXPECT_EQ(LimitText(int64_t{64} << 30), "64 GiB");
  EXPECT_EQ(LimitText(1000), "1000 bytes");
}

TEST(JsonNesting, CountsArraysAndObjectsOutsideStrings) {
  EXPECT_TRUE(CheckJsonNesting("{\"a\": [[1], {\"b\": [2]}]}", 4, "x").ok());
  EXPECT_FALSE(CheckJsonNesting("{\"a\": [[1], {\"b\": [2]}]}", 3, "x").ok());
  // Brackets inside strings, also after escaped quotes, do not count.
  EXPECT_TRUE(CheckJsonNesting(R"({"a": "[[[[\"[[[[", "b": "\\"})", 1, "x").ok());
  EXPECT_TRUE(CheckJsonNesting("", 0, "x").ok());
  EXPECT_TRUE(CheckJsonNesting("]]]]}}}", 1, "x").ok());  // malformed, but not deep

  const std::string at_limit = std::string(64, '[') + std::string(64, ']');
  EXPECT_TRUE(CheckJsonNesting(at_limit, kMaxInputNestingDepth, "x").ok());
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  absl::Status status = CheckJsonNesting(deep, kMaxInputNestingDepth, "data.jsonl:7");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "data.jsonl:7: JSON nested deeper than 64 levels (at byte 64)");
  EXPECT_EQ(CheckJsonNesting("[[", 1, "").message(),
            "JSON nested deeper than 1 levels (at byte 1)");
}

TEST(YamlNesting, CountsFlowCollectionsWithLines) {
  EXPECT_TRUE(CheckYamlNesting("a: {b: [1, 2], c: {d: [3]}}\n", 3, "job.yaml").ok());
  absl::Status status = CheckYamlNesting("a: 1\nb: {c: [[[1]]]}\n", 3, "job.yaml");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "job.yaml: line 2: YAML nested deeper than 3 levels");
  // Quoted scalars, comments and brackets inside plain words do not count.
  EXPECT_TRUE(CheckYamlNesting("a: '[[[['\nb: \"{{{{\\\"{{\"\nc: x[[[[y  # [[[[\n# {{{{\n"
                               "d: 'it''s [[[['\n",
                               1, "job.yaml")
                  .ok());
  // An apostrophe inside a word does not open a quoted scalar that would hide
  // the brackets after it.
  EXPECT_FALSE(CheckYamlNesting("name: it's\nx: [[[[1]]]]\n", 3, "job.yaml").ok());
  const std::string deep = "train: " + std::string(200000, '[');
  EXPECT_EQ(CheckYamlNesting(deep, kMaxInputNestingDepth, "job.yaml").message(),
            "job.yaml: line 1: YAML nested deeper than 64 levels");
}

}  // namespace
}  // namespace sbp
