// A checkpoint directory gets its base model's tokenizer files and generation
// defaults, or generation defaults from the model's own special token ids.
#include "worker/train/checkpoint_companions.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "nlohmann/json.hpp"
#include "tests/worker/train/test_util.h"
#include "worker/model/file_util.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

class CheckpointCompanionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = train_testing::MakeTempDir("companions");
    fs::create_directories(root_ + "/base");
    fs::create_directories(root_ + "/checkpoint");
    config_.bos_token_id = 1;
    config_.eos_token_ids = {2, 7};
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_;
  ModelConfig config_;
};

TEST_F(CheckpointCompanionsTest, CopiesTheBaseModelsTokenizerAndGenerationConfig) {
  train_testing::WriteFile(root_ + "/base/tokenizer.json", R"({"model": {}})");
  train_testing::WriteFile(root_ + "/base/tokenizer_config.json", R"({"eos_token": "x"})");
  train_testing::WriteFile(root_ + "/base/generation_config.json", R"({"temperature": 0.6})");
  train_testing::WriteFile(root_ + "/base/notes.txt", "not a companion");
  ASSERT_TRUE(WriteCheckpointCompanions(root_ + "/base", config_, root_ + "/checkpoint").ok());
  EXPECT_EQ(*ReadFileToString(root_ + "/checkpoint/tokenizer.json"), R"({"model": {}})");
  EXPECT_EQ(*ReadFileToString(root_ + "/checkpoint/tokenizer_config.json"),
            R"({"eos_token": "x"})");
  EXPECT_EQ(*ReadFileToString(root_ + "/checkpoint/generation_config.json"),
            R"({"temperature": 0.6})");
  EXPECT_FALSE(fs::exists(root_ + "/checkpoint/notes.txt"));
  EXPECT_FALSE(fs::exists(root_ + "/checkpoint/merges.txt"));
}

TEST_F(CheckpointCompanionsTest, WritesGenerationDefaultsWhenTheBaseHasNone) {
  for (const std::string& base : {root_ + "/base", std::string()}) {
    ASSERT_TRUE(WriteCheckpointCompanions(base, config_, root_ + "/checkpoint").ok());
    const nlohmann::json j =
        nlohmann::json::parse(*ReadFileToString(root_ + "/checkpoint/generation_config.json"));
    EXPECT_EQ(j["bos_token_id"], 1);
    EXPECT_EQ(j["eos_token_id"], nlohmann::json({2, 7}));
  }
}

TEST_F(CheckpointCompanionsTest, AnUnreadableCompanionIsAnErrorNamingIt) {
  fs::create_directories(root_ + "/base/tokenizer.json");  // a directory, not a file
  const absl::Status status =
      WriteCheckpointCompanions(root_ + "/base", config_, root_ + "/checkpoint");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("tokenizer.json"), std::string::npos) << status;
}

}  // namespace
}  // namespace sbp
