// Sequence-parallel jobs through the control plane: `sbp run` with P = 2 and
// P = 4 local workers (Gloo) ends at the weights of one worker; a rank
// SIGKILLed mid-step fails the attempt on every rank within the collective
// timeout, naming the collective, and the retry resumes from the latest
// checkpoint and completes.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "kernels/allocator.h"
#include "tests/e2e/cluster_test_util.h"
#include "worker/model/safetensors.h"

namespace sbp::testing {
namespace {

using std::chrono::seconds;

// A job over the cluster's tiny model (4 query and 2 KV heads: P = 4 puts
// one KV head on two ranks) and its 9-token sequences (P does not divide
// them: padding). Adam's eps is above the ranks' rounding noise (see
// tests/worker/dist/sequence_parallel_training_test.cc).
std::string Job(const std::string& name, int steps, int every, int world, int parallel) {
  return absl::StrCat("name: ", name,
                      "\nmodel: model\ndata: data.jsonl\nobjective: sft\nseq_len: 16\n"
                      "streambp: {mode: stream, chunk_tokens: 2, logits_chunk_tokens: 4}\n"
                      "train: {steps: ",
                      steps, ", sequences_per_step: 4, lr: 1.0e-3, eps: 1.0e-5}\n",
                      "checkpoint: {every_steps: ", every, ", dir: runs/", name,
                      "}\nmax_restarts: 2\nresources: {world_size: ", world,
                      ", sequence_parallel: ", parallel, ", device: cpu}\n");
}

// Largest per-tensor relative distance between two checkpoints' weights
// (fp32 rounding compounded over a few Adam steps; the 20-step comparison at
// ZeRO-2's tolerance is tests/worker/dist/sequence_parallel_training_test.cc).
double WeightDistance(const std::filesystem::path& a, const std::filesystem::path& b) {
  CpuAllocator allocator;
  auto x = SafetensorsFile::Open((a / "model.safetensors").string());
  auto y = SafetensorsFile::Open((b / "model.safetensors").string());
  EXPECT_TRUE(x.ok() && y.ok()) << a << " " << b;
  if (!x.ok() || !y.ok()) return 1;
  EXPECT_EQ(x->names(), y->names());
  double worst = 0;
  for (const std::string& name : x->names()) {
    auto u = x->ReadAsF32(name, allocator);
    auto v = y->ReadAsF32(name, allocator);
    EXPECT_TRUE(u.ok() && v.ok()) << name;
    if (!u.ok() || !v.ok()) return 1;
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < u->numel(); ++i) {
      const double p = u->data<float>()[i], q = v->data<float>()[i];
      diff += (p - q) * (p - q);
      norm += q * q;
    }
    worst = std::max(worst, std::sqrt(diff / std::max(norm, 1e-300)));
  }
  return worst;
}

TEST(SequenceParallelClusterTest, SbpRunWithTwoAndFourRanksMatchesOneWorker) {
  Cluster c("sequence_parallel_run");
  const std::string env = "OMP_NUM_THREADS=1 " + SbpBinary();
  c.WriteSpec("one", Job("one", 6, 6, 1, 1));
  const CommandResult one = RunCommand(env + " run one.yaml --workers 1", c.dir());
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  for (int p : {2, 4}) {
    const std::string name = absl::StrCat("p", p);
    c.WriteSpec(name, Job(name, 6, 6, p, p));
    const CommandResult r =
        RunCommand(absl::StrCat(env, " run ", name, ".yaml --workers ", p), c.dir());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.err.find(absl::StrCat("all ", p, " ranks finished at step 6")), std::string::npos)
        << r.err;
    EXPECT_LE(WeightDistance(c.dir() / "runs/one/checkpoints/step-00000006",
                             c.dir() / "runs" / name / "checkpoints/step-00000006"),
              1e-5)
        << name;
    // The metrics count each sequence once and show the exchange.
    const std::string metrics = ReadAll((c.dir() / "runs" / name / "metrics.jsonl").string());
    EXPECT_NE(metrics.find("\"all_to_all_bytes\""), std::string::npos) << metrics;
  }
}

TEST(SequenceParallelClusterTest, KilledRankFailsTheGroupAndTheRetryResumes) {
  constexpr int kSteps = 40, kEvery = 5;
  Cluster c("sequence_parallel_fault");
  c.StartCoordinator(/*lease_seconds=*/2);
  for (const char* name : {"w0", "w1", "w2"}) c.StartWorker(name, {"--collective-timeout", "10"});
  ASSERT_TRUE(
      WaitFor([&] { return c.Sbp("workers").out.find("w2") != std::string::npos; }, seconds(20)));
  const std::string id = c.Submit(c.WriteSpec("fault", Job("fault", kSteps, kEvery, 2, 2)));
  ASSERT_TRUE(WaitFor([&] { return c.Step(id) >= kEvery + 2; }, seconds(60))) << c.Logs();

  const std::vector<std::string> ranks = c.RankWorkerNames(id);
  ASSERT_EQ(ranks.size(), 2u) << c.GetJob(id).dump(1);
  const std::string survivor = ranks[0], victim = ranks[1];
  const auto killed_at = std::chrono::steady_clock::now();
  c.worker(victim).Kill(SIGKILL);

  // The surviving rank's collective in flight (most of a step is the
  // group's all-to-alls; the step's all-reduces and ZeRO-2's reduce-scatters
  // run too) fails within the collective timeout (10 s) and names itself.
  // tests/worker/dist/all_to_all_test.cc kills a rank inside an all-to-all
  // deterministically.
  const std::string survivor_log = (c.dir() / (survivor + ".log")).string();
  const std::regex named(
      "(all-to-all|all-reduce|reduce-scatter|all-gather) on rank 0 of 2: a peer");
  ASSERT_TRUE(WaitFor([&] { return std::regex_search(ReadAll(survivor_log), named); }, seconds(20)))
      << c.Logs();
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, seconds(15));

  ExpectRetryResumesAndCompletes(c, id, kSteps, kEvery);
}

}  // namespace
}  // namespace sbp::testing
