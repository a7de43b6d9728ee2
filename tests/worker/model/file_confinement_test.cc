// The file confinement a worker puts around a job: reads and writes are
// checked on what was actually opened, so links pointing out of the job's
// directories are refused however late they were planted.
#include "common/file_confinement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <thread>

#include "tests/worker/model/test_util.h"
#include "worker/model/file_util.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using ::sbp::testing::MakeTempDir;
using ::sbp::testing::WriteFile;
using ::testing::HasSubstr;

class FileConfinementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::canonical(MakeTempDir("confinement")).string();
    work_ = root_ + "/work";
    area_ = work_ + "/alice";
    shared_ = root_ + "/shared";
    outside_ = root_ + "/outside";
    for (const std::string& dir : {work_, area_, shared_, outside_}) fs::create_directories(dir);
    WriteFile(work_ + "/data.jsonl", "inside\n");
    WriteFile(shared_ + "/model.json", "shared\n");
    WriteFile(outside_ + "/secret", "secret\n");
  }

  FileConfinement Rules() const {
    FileConfinement rules;
    rules.write_roots = {area_};
    rules.read_roots = {work_, shared_};
    return rules;
  }

  std::string root_, work_, area_, shared_, outside_;
};

TEST_F(FileConfinementTest, ReadsInsideTheRootsPass) {
  ScopedFileConfinement confined(Rules());
  EXPECT_EQ(*ReadFileToString(work_ + "/data.jsonl"), "inside\n");
  EXPECT_EQ(*ReadFileToString(shared_ + "/model.json"), "shared\n");
  // A link that stays inside is followed.
  fs::create_symlink(shared_ + "/model.json", work_ + "/model-link.json");
  EXPECT_EQ(*ReadFileToString(work_ + "/model-link.json"), "shared\n");
}

TEST_F(FileConfinementTest, ReadThroughALinkOutIsRefused) {
  fs::create_symlink(outside_, work_ + "/escape");
  ScopedFileConfinement confined(Rules());
  absl::StatusOr<std::string> read = ReadFileToString(work_ + "/escape/secret");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr(outside_ + "/secret"));
  EXPECT_THAT(read.status().message(), HasSubstr("outside the directories this job may read"));
  EXPECT_FALSE(MappedFile::Open(work_ + "/escape/secret").ok());
}

TEST_F(FileConfinementTest, WithoutConfinementEverythingOpens) {
  fs::create_symlink(outside_, work_ + "/escape");
  EXPECT_FALSE(FileConfinementActive());
  EXPECT_EQ(*ReadFileToString(work_ + "/escape/secret"), "secret\n");
  EXPECT_TRUE(WriteFileAtomically(work_ + "/escape/written", "x").ok());
  EXPECT_TRUE(fs::exists(outside_ + "/written"));
}

TEST_F(FileConfinementTest, WritesGoOnlyIntoTheWriteRoots) {
  ScopedFileConfinement confined(Rules());
  EXPECT_TRUE(WriteFileAtomically(area_ + "/run.json", "{}\n").ok());
  // Readable is not writable: the rest of the work directory and the shared one.
  absl::Status shared = WriteFileAtomically(shared_ + "/model.json", "overwritten");
  EXPECT_EQ(shared.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shared.message(), HasSubstr("outside the directories this job may write"));
  EXPECT_FALSE(WriteFileAtomically(work_ + "/data.jsonl", "overwritten").ok());
  EXPECT_EQ(*ReadFileToString(shared_ + "/model.json"), "shared\n");
  EXPECT_EQ(*ReadFileToString(work_ + "/data.jsonl"), "inside\n");
}

TEST_F(FileConfinementTest, ADirectorySwappedForALinkWritesNothingOutside) {
  // The run directory existed when the paths were checked, then became a link.
  fs::create_symlink(outside_, area_ + "/run");
  ScopedFileConfinement confined(Rules());
  absl::Status status = WriteFileAtomically(area_ + "/run/checkpoint.json", "{}");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(outside_));
  EXPECT_FALSE(fs::exists(outside_ + "/checkpoint.json"));
  EXPECT_FALSE(fs::exists(outside_ + "/checkpoint.json.tmp"));
  // Directory operations are refused before they run.
  EXPECT_FALSE(CheckConfinedPath(area_ + "/run/checkpoints/step-1", FileAccess::kWrite).ok());
  EXPECT_TRUE(CheckConfinedPath(area_ + "/new/deeper/step-1", FileAccess::kWrite).ok());
  EXPECT_FALSE(CheckConfinedPath(area_ + "/new/../../../outside", FileAccess::kWrite).ok());
}

TEST_F(FileConfinementTest, ALinkPlantedAsTheFileItselfIsNotFollowed) {
  fs::create_symlink(outside_ + "/secret", area_ + "/latest.tmp");
  {
    ScopedFileConfinement confined(Rules());
    EXPECT_FALSE(WriteFileAtomically(area_ + "/latest", "step-2\n").ok());
  }
  EXPECT_EQ(*ReadFileToString(outside_ + "/secret", 100), "secret\n");
}

TEST_F(FileConfinementTest, TheConfinementEndsWithItsScopeAndStaysOnItsThread) {
  {
    ScopedFileConfinement confined(Rules());
    EXPECT_TRUE(FileConfinementActive());
    bool other_thread_confined = true;
    std::thread([&] { other_thread_confined = FileConfinementActive(); }).join();
    EXPECT_FALSE(other_thread_confined);
  }
  EXPECT_FALSE(FileConfinementActive());
}

}  // namespace
}  // namespace sbp
