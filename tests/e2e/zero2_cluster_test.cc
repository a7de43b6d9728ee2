// Multi-worker (ZeRO-2) jobs through the control plane: `sbp run` with two
// local workers, and a rank SIGKILLed mid-step — the surviving rank's
// collective fails within its timeout, the attempt fails on every rank, and
// the retry resumes from the latest checkpoint (each rank's optimizer shard)
// and completes.
#include <gtest/gtest.h>

#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

constexpr char kWorldSize2[] = "resources: {world_size: 2, device: cpu}\n";

TEST(Zero2ClusterTest, SbpRunWithTwoLocalWorkers) {
  Cluster c("zero2_run");
  c.WriteSpec("zero2", c.Spec("zero2", 12, 6, 5, kWorldSize2));
  const CommandResult r =
      RunCommand("OMP_NUM_THREADS=1 " + SbpBinary() + " run zero2.yaml --workers 2", c.dir());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("all 2 ranks finished at step 12"), std::string::npos) << r.err;
  // Rank 0 wrote one metrics line per step; the checkpoint holds one
  // optimizer shard per rank.
  const std::string metrics = ReadAll((c.dir() / "runs/zero2/metrics.jsonl").string());
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 12) << metrics;
  const auto step = c.dir() / "runs/zero2/checkpoints/step-00000012";
  EXPECT_TRUE(std::filesystem::exists(step / "model.safetensors"));
  EXPECT_TRUE(
      std::filesystem::exists(step / "trainer_state/optimizer-rank-00000-of-00002.safetensors"));
  EXPECT_TRUE(
      std::filesystem::exists(step / "trainer_state/optimizer-rank-00001-of-00002.safetensors"));
}

TEST(Zero2ClusterTest, KilledRankFailsTheAttemptAndTheRetryCompletes) {
  constexpr int kSteps = 40, kEvery = 5;
  Cluster c("zero2_fault");
  c.StartCoordinator(/*lease_seconds=*/2);
  for (const char* name : {"w0", "w1", "w2"}) c.StartWorker(name, {"--collective-timeout", "10"});
  ASSERT_TRUE(
      WaitFor([&] { return c.Sbp("workers").out.find("w2") != std::string::npos; }, seconds(20)));
  const std::string id =
      c.Submit(c.WriteSpec("fault", c.Spec("fault", kSteps, 6, kEvery, kWorldSize2)));
  ASSERT_TRUE(WaitFor([&] { return c.Step(id) >= kEvery + 2; }, seconds(60))) << c.Logs();

  const std::vector<std::string> ranks = c.RankWorkerNames(id);
  ASSERT_EQ(ranks.size(), 2u) << c.GetJob(id).dump(1);
  const std::string survivor = ranks[0], victim = ranks[1];
  const auto killed_at = std::chrono::steady_clock::now();
  c.worker(victim).Kill(SIGKILL);

  // The surviving rank lets go of attempt 1 within the collective timeout
  // (10 s). Two orders are both right: its collective fails first and it
  // reports the failure, or the victim's lease (2 s) runs out first, the
  // coordinator ends the attempt, and the survivor drops it once its
  // collective returns.
  const std::string survivor_log = (c.dir() / (survivor + ".log")).string();
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string log = ReadAll(survivor_log);
        const bool reported =
            log.find("a peer") != std::string::npos && log.find(" failed: ") != std::string::npos;
        const bool dropped =
            log.find("attempt 1 is over at the coordinator; dropped it") != std::string::npos;
        return reported || dropped;
      },
      seconds(20)))
      << c.Logs();
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, seconds(15));

  ExpectRetryResumesAndCompletes(c, id, kSteps, kEvery);
}

}  // namespace
}  // namespace sbp::testing
