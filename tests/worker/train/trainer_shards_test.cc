// Training from token shards is training from the same token JSONL: the same
// run ends with bit-identical weights (on one worker and on two ZeRO-2 ranks,
// which split each step's examples the same way), and a run resumed mid-epoch
// from shards ends bit-identical to an uninterrupted one.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/train/trainer_fixture.h"
#include "worker/dist/connect.h"
#include "worker/train/dataset.h"
#include "worker/train/token_shards.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

class TrainerShardsTest : public train_testing::TrainerFixture {
 protected:
  void SetUp() override {
    TrainerFixture::SetUp();
    WriteTenExamples();
  }

  JobSpec ShardSpec(const std::string& name, const std::string& file) {
    JobSpec spec = Spec(name);
    spec.data = (root_ / file).string();
    spec.train.steps = 7;
    spec.checkpoint.every_steps = 3;
    return spec;
  }
};

TEST_F(TrainerShardsTest, ShardsAndJsonlTrainBitIdentically) {
  JobSpec jsonl = ShardSpec("from_jsonl", "ten.jsonl");
  JobSpec shards = ShardSpec("from_shards", "ten.shard");
  ASSERT_TRUE(RunTraining(jsonl, {}, nullptr).ok());
  auto summary = RunTraining(shards, {}, nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(FinalWeights(jsonl), FinalWeights(shards));
  const auto a = Metrics(jsonl), b = Metrics(shards);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;
    EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]) << "step " << i + 1;
  }
}

TEST_F(TrainerShardsTest, Zero2RanksSplitShardsAsTheySplitJsonl) {
  auto run = [&](const std::string& name, const std::string& file) {
    JobSpec spec = ShardSpec(name, file);
    spec.train.steps = 4;
    spec.resources.world_size = 2;
    const std::string rendezvous = (root_ / ("rendezvous-" + name)).string();
    fs::create_directories(rendezvous);
    const std::vector<int> codes = dist_testing::RunRankProcesses(2, [&](int rank) {
      TrainOptions options;
      options.connect = [&](Backend& backend) {
        return ConnectThroughDirectory(rendezvous, backend, {rank, 2});
      };
      auto summary = RunTraining(spec, options, nullptr);
      if (!summary.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, summary.status().ToString().c_str());
      }
      return summary.ok() ? 0 : 1;
    });
    EXPECT_EQ(codes, std::vector<int>({0, 0}));
    return spec;
  };
  const JobSpec jsonl = run("zero2_jsonl", "ten.jsonl");
  const JobSpec shards = run("zero2_shards", "ten.shard");
  EXPECT_EQ(FinalWeights(jsonl), FinalWeights(shards));
}

TEST_F(TrainerShardsTest, ResumeMidEpochFromShardsIsBitIdentical) {
  JobSpec straight = ShardSpec("straight", "ten.shard");
  ASSERT_TRUE(RunTraining(straight, {}, nullptr).ok());
  JobSpec interrupted = ShardSpec("interrupted", "ten.shard");
  TrainOptions stop;
  stop.stop_after_step = 4;  // 16 examples taken: 6 into the second epoch
  auto first = RunTraining(interrupted, stop, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->last_step, 4);
  auto second = RunTraining(interrupted, {}, nullptr);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->first_step, 5);
  EXPECT_EQ(FinalWeights(straight), FinalWeights(interrupted));
}

TEST_F(TrainerShardsTest, ACorruptShardFailsTheRunWithItsName) {
  const std::string path = (root_ / "bad.shard").string();
  {
    std::ifstream in(root_ / "ten.shard", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() - 9);
  }
  auto summary = RunTraining(ShardSpec("bad", "bad.shard"), {}, nullptr);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument) << summary.status();
  EXPECT_NE(summary.status().message().find(path), std::string::npos) << summary.status();
  EXPECT_NE(summary.status().message().find("truncated"), std::string::npos) << summary.status();
}

}  // namespace
}  // namespace sbp
