// Training with `data: {packing: true}`: each step's examples (each rank's
// share under ZeRO-2) are packed deterministically, so a packed run from
// shards equals one from JSONL bit for bit, a packed run resumed mid-epoch
// ends bit-identical to an uninterrupted one, two ZeRO-2 ranks packing their
// shares train like one worker packing the whole step, and a packed step's
// loss is the unpacked step's loss (packing is exact).
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

class TrainerPackingTest : public train_testing::TrainerFixture {
 protected:
  void SetUp() override {
    TrainerFixture::SetUp();
    // With seq_len 40 a step's examples make one or two packed sequences.
    WriteTenExamples();
  }

  JobSpec PackedSpec(const std::string& name, const std::string& file, bool packing = true) {
    JobSpec spec = Spec(name);
    spec.data = (root_ / file).string();
    spec.data_packing = packing;
    spec.seq_len = 40;
    spec.streambp = {BackwardMode::kStream, 7, 5};  // chunks cut documents
    spec.train.steps = 7;
    spec.train.micro_batch_sequences = 4;
    spec.checkpoint.every_steps = 3;
    return spec;
  }
};

TEST_F(TrainerPackingTest, PackedShardsAndJsonlTrainBitIdentically) {
  JobSpec jsonl = PackedSpec("packed_jsonl", "ten.jsonl");
  JobSpec shards = PackedSpec("packed_shards", "ten.shard");
  ASSERT_TRUE(RunTraining(jsonl, {}, nullptr).ok());
  auto summary = RunTraining(shards, {}, nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(FinalWeights(jsonl), FinalWeights(shards));
}

TEST_F(TrainerPackingTest, PackedStepLossEqualsUnpackedStepLoss) {
  JobSpec packed = PackedSpec("packed", "ten.jsonl");
  JobSpec unpacked = PackedSpec("unpacked", "ten.jsonl", /*packing=*/false);
  packed.train.steps = unpacked.train.steps = 1;
  ASSERT_TRUE(RunTraining(packed, {}, nullptr).ok());
  ASSERT_TRUE(RunTraining(unpacked, {}, nullptr).ok());
  const auto a = Metrics(packed), b = Metrics(unpacked);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  const double loss = b[0]["loss"].get<double>();
  EXPECT_NEAR(a[0]["loss"].get<double>(), loss, 1e-5 * loss);
  EXPECT_EQ(a[0]["tokens"], b[0]["tokens"]);
}

TEST_F(TrainerPackingTest, ResumeMidEpochOfAPackedRunIsBitIdentical) {
  JobSpec straight = PackedSpec("straight", "ten.shard");
  ASSERT_TRUE(RunTraining(straight, {}, nullptr).ok());
  JobSpec interrupted = PackedSpec("interrupted", "ten.shard");
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

TEST_F(TrainerPackingTest, Zero2RanksPackTheirSharesLikeOneWorker) {
  JobSpec one = PackedSpec("packed_one", "ten.jsonl");
  one.train.steps = 3;
  ASSERT_TRUE(RunTraining(one, {}, nullptr).ok());
  JobSpec two = PackedSpec("packed_two", "ten.jsonl");
  two.train.steps = 3;
  two.resources.world_size = 2;
  const std::string rendezvous = (root_ / "rendezvous").string();
  fs::create_directories(rendezvous);
  const std::vector<int> codes = dist_testing::RunRankProcesses(2, [&](int rank) {
    TrainOptions options;
    options.connect = [&](Backend& backend) {
      return ConnectThroughDirectory(rendezvous, backend, {rank, 2});
    };
    auto summary = RunTraining(two, options, nullptr);
    if (!summary.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, summary.status().ToString().c_str());
    }
    return summary.ok() ? 0 : 1;
  });
  ASSERT_EQ(codes, std::vector<int>({0, 0}));
  const auto a = Metrics(one), b = Metrics(two);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double loss = a[i]["loss"].get<double>();
    EXPECT_NEAR(b[i]["loss"].get<double>(), loss, 1e-4 * loss) << "step " << i + 1;
    EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace sbp
