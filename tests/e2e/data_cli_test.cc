// `sbp data` as a user runs it: token JSONL becomes a shard file that `sbp
// train` reads, a damaged shard ends the run with its name and exit code 2,
// and `sbp data prepare` without its Python tools says how to install them.
// (The tokenizing itself is tested by tests/tools/data_prepare_test.py, which
// needs the tools; .ci/run installs them and runs it.)
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/e2e/cli_test_util.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;

class DataCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir(std::string("data_cli_") +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    const CommandResult init =
        RunCommand(SbpBinary() + " model init --preset tiny-qwen3 --seed 2 --out model", dir_);
    ASSERT_EQ(init.exit_code, 0) << init.err;
    WriteFile(dir_ / "data.jsonl",
              "{\"prompt_ids\": [1, 17, 18, 19, 2], \"completion_ids\": [19, 18, 17, 3]}\n"
              "{\"input_ids\": [1, 20, 21, 2, 21, 20, 3], \"labels\": [-100, -100, -100, -100, "
              "21, 20, 3]}\n");
  }

  CommandResult Train(const std::string& data) {
    WriteFile(dir_ / "job.yaml", "name: data-job\nmodel: model\ndata: " + data +
                                     "\nobjective: sft\nseq_len: 32\n"
                                     "streambp: {mode: stream, chunk_tokens: 4, "
                                     "logits_chunk_tokens: 4}\n"
                                     "train: {steps: 3, sequences_per_step: 2, lr: 1.0e-2}\n"
                                     "checkpoint: {dir: run-" +
                                     data + "}\n");
    return RunCommand(SbpBinary() + " train job.yaml", dir_);
  }

  fs::path dir_;
};

TEST_F(DataCliTest, TokenJsonlToShardsThatTrainLikeTheJsonl) {
  const CommandResult shards = RunCommand(
      SbpBinary() + " data shards --objective sft --vocab-size 256 data.jsonl --out data.shard",
      dir_);
  ASSERT_EQ(shards.exit_code, 0) << shards.err;
  EXPECT_NE(shards.out.find("\"examples\":2"), std::string::npos) << shards.out;
  const CommandResult from_shards = Train("data.shard");
  ASSERT_EQ(from_shards.exit_code, 0) << from_shards.err;
  const CommandResult from_jsonl = Train("data.jsonl");
  ASSERT_EQ(from_jsonl.exit_code, 0) << from_jsonl.err;
  EXPECT_EQ(
      ReadAll((dir_ / "run-data.shard/checkpoints/step-00000003/model.safetensors").string()),
      ReadAll((dir_ / "run-data.jsonl/checkpoints/step-00000003/model.safetensors").string()));
  // `sbp grad` reads either, with the same loss and gradients.
  const CommandResult grad_shards = RunCommand(
      SbpBinary() + " grad --model model --data data.shard --out g-shard.safetensors", dir_);
  ASSERT_EQ(grad_shards.exit_code, 0) << grad_shards.err;
  const CommandResult grad_jsonl = RunCommand(
      SbpBinary() + " grad --model model --data data.jsonl --out g-jsonl.safetensors", dir_);
  ASSERT_EQ(grad_jsonl.exit_code, 0) << grad_jsonl.err;
  EXPECT_EQ(ReadAll((dir_ / "g-shard.safetensors").string()),
            ReadAll((dir_ / "g-jsonl.safetensors").string()));
  EXPECT_NE(grad_shards.out.find("\"valid_targets\":7"), std::string::npos) << grad_shards.out;
}

TEST_F(DataCliTest, ADamagedShardIsBadInputNamingTheFile) {
  ASSERT_EQ(
      RunCommand(SbpBinary() + " data shards --objective sft --vocab-size 256 data.jsonl --out "
                               "data.shard && truncate -s -3 data.shard",
                 dir_)
          .exit_code,
      0);
  const CommandResult r = Train("data.shard");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("data.shard: is "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
}

TEST_F(DataCliTest, ShardsOfIdsOutsideTheVocabularyAreRefused) {
  const CommandResult r = RunCommand(
      SbpBinary() + " data shards --objective sft --vocab-size 16 data.jsonl --out data.shard",
      dir_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("data.jsonl:1: prompt_ids[1] = 17 is outside the vocabulary [0, 16)"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "data.shard"));
}

TEST_F(DataCliTest, PrepareWithoutPythonSaysHowToInstallIt) {
  const CommandResult r = RunCommand("SBP_PYTHON=/nonexistent/python " + SbpBinary() +
                                         " data prepare --tokenizer tok data.jsonl --out out",
                                     dir_);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("scripts/bootstrap --python"), std::string::npos) << r.err;
  const CommandResult usage = RunCommand(SbpBinary() + " data prepare data.jsonl", dir_);
  EXPECT_EQ(usage.exit_code, 2) << usage.err;
  EXPECT_NE(usage.err.find("--tokenizer"), std::string::npos) << usage.err;
}

}  // namespace
}  // namespace sbp::testing
