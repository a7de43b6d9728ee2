// Ulysses sequence parallelism in the engine equals one rank: P rank
// processes (Gloo over loopback) each run their T / P rows of every sequence
// with the attention exchanged across the group, and the sum of their
// gradients equals the single-rank gradients to fp32 rounding, in every
// backward mode and chunking, for the three architectures, with GQA below
// (P = 2) and above (P = 4, replicated KV heads) the KV head count, lengths
// P does not divide (padding), masked labels across the cut and packed
// documents cut by it. The loss every rank returns is the whole sequence's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/worker/dist/rank_processes.h"
#include "tests/worker/engine/engine_test_util.h"
#include "tests/worker/train/test_util.h"
#include "worker/dist/communicator_sequence_group.h"
#include "worker/train/packing.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;
using dist_testing::RunRankProcesses;

struct RankResult {
  double loss = 0;
  int64_t bytes_sent = 0;
  std::vector<float> gradients;  // every gradient tensor, in NamedTensors order
};

void Save(const std::string& path, const RankResult& r) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&r.loss), sizeof(r.loss));
  out.write(reinterpret_cast<const char*>(&r.bytes_sent), sizeof(r.bytes_sent));
  out.write(reinterpret_cast<const char*>(r.gradients.data()),
            static_cast<std::streamsize>(r.gradients.size() * sizeof(float)));
}

RankResult LoadResult(const std::string& path, size_t floats) {
  RankResult r;
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(&r.loss), sizeof(r.loss));
  in.read(reinterpret_cast<char*>(&r.bytes_sent), sizeof(r.bytes_sent));
  r.gradients.resize(floats);
  in.read(reinterpret_cast<char*>(r.gradients.data()),
          static_cast<std::streamsize>(floats * sizeof(float)));
  EXPECT_TRUE(in.good()) << path;
  return r;
}

std::vector<float> Flatten(const ParameterStore& store) {
  std::vector<float> out;
  for (const auto& [name, t] : store.NamedTensors()) {
    const float* p = t.data<float>();
    out.insert(out.end(), p, p + t.numel());
  }
  return out;
}

// The batch on P ranks: each rank writes its gradients and loss to `dir`.
std::vector<RankResult> RunOnGroup(const ModelConfig& config, uint64_t seed,
                                   const std::vector<TokenSequence>& batch,
                                   const EngineOptions& options, int group_size,
                                   const std::string& dir, size_t floats) {
  fs::remove_all(dir);
  fs::create_directories(dir + "/rendezvous");
  const std::vector<int> codes = RunRankProcesses(group_size, [&](int rank) {
    auto comm = dist_testing::ConnectThroughDirectory(dir + "/rendezvous", rank, group_size);
    if (!comm.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().ToString().c_str());
      return 1;
    }
    CommunicatorSequenceGroup group(**comm);
    TestModel model(config, seed);
    auto grads = ParameterStore::Create(config, model.allocator, "gradients");
    if (!grads.ok()) return 2;
    Engine engine(config, *model.backend, options);
    engine.set_sequence_group(&group);
    ModelTensors w = BindModelTensors(model.weights);
    ModelTensors g = BindModelTensors(*grads);
    auto result = SftForwardBackward(engine, w, batch, g);
    if (!result.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, result.status().ToString().c_str());
      return 3;
    }
    Save(absl::StrCat(dir, "/rank-", rank),
         {result->loss, engine.sequence_bytes_sent(), Flatten(*grads)});
    return 0;
  });
  std::vector<RankResult> results;
  for (int r = 0; r < group_size; ++r) {
    EXPECT_EQ(codes[r], 0) << "rank " << r;
    if (codes[r] != 0) return {};
    results.push_back(LoadResult(absl::StrCat(dir, "/rank-", r), floats));
  }
  return results;
}

// Normwise relative error of the summed rank gradients, tensor by tensor.
void ExpectSumClose(const std::vector<RankResult>& ranks, const ParameterStore& reference,
                    double tolerance, const std::string& label) {
  size_t offset = 0;
  for (const auto& [name, t] : reference.NamedTensors()) {
    const float* ref = t.data<float>();
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      double sum = 0;
      for (const RankResult& r : ranks) sum += r.gradients[offset + i];
      diff += (sum - ref[i]) * (sum - ref[i]);
      norm += static_cast<double>(ref[i]) * ref[i];
    }
    offset += static_cast<size_t>(t.numel());
    EXPECT_GT(norm, 0.0) << label << ": " << name;
    EXPECT_LE(std::sqrt(diff / std::max(norm, 1e-300)), tolerance) << label << ": " << name;
  }
}

std::string Label(const std::string& preset, int p, const EngineOptions& o) {
  return absl::StrCat(preset, " P=", p, " ", BackwardModeName(o.mode), " chunk ", o.chunk_tokens,
                      " logits chunk ", o.logits_chunk_tokens);
}

class SequenceParallelEngineTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = train_testing::MakeTempDir("sequence_parallel_engine"); }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_;
};

TEST_F(SequenceParallelEngineTest, RanksSumToOneRankInEveryMode) {
  const std::vector<EngineOptions> modes = {{BackwardMode::kFull, 0, 0},
                                            {BackwardMode::kCheckpoint, 0, 0},
                                            {BackwardMode::kStream, 7, 5},
                                            {BackwardMode::kStream, 1, 1},
                                            {BackwardMode::kStream, 16, 3}};
  for (const char* preset : {"tiny-qwen3", "tiny-llama", "tiny-qwen2"}) {
    auto config = PresetConfig(preset);
    ASSERT_TRUE(config.ok());
    TestModel model(*config, /*seed=*/7);
    // 48 and 40 split evenly; 37 and 3 do not (padding rows, and a rank with
    // no real rows at all for 3 tokens on 4 ranks). MakeBatch masks a
    // prefix and an interior span, which the cut crosses.
    const std::vector<TokenSequence> batch = MakeBatch(*config, {48, 37, 40, 3}, 11);
    auto [reference, ref_result] = model.Gradients(batch, {BackwardMode::kFull, 0, 0});
    const size_t floats = Flatten(reference).size();
    for (int p : {2, 4}) {
      for (const EngineOptions& options : modes) {
        const std::string label = Label(preset, p, options);
        const std::vector<RankResult> ranks =
            RunOnGroup(*config, 7, batch, options, p, root_ + "/run", floats);
        ASSERT_EQ(ranks.size(), static_cast<size_t>(p)) << label;
        for (const RankResult& r : ranks) {
          EXPECT_NEAR(r.loss, ref_result.loss, 1e-5 * ref_result.loss) << label;
          EXPECT_GT(r.bytes_sent, 0) << label;
        }
        ExpectSumClose(ranks, reference, 1e-4, label);
      }
    }
  }
}

TEST_F(SequenceParallelEngineTest, PackedDocumentsCutByTheSplit) {
  auto config = PresetConfig("tiny-qwen3");
  ASSERT_TRUE(config.ok());
  TestModel model(*config, /*seed=*/3);
  const std::vector<TokenSequence> docs = MakeBatch(*config, {29, 13, 1, 2, 40, 9}, 5);
  // One sequence of 94 tokens: the cuts at 47 (P = 2) and 23, 47, 70 (P = 4)
  // fall inside documents.
  const std::vector<TokenSequence> packed = PackSequences(docs, 94);
  ASSERT_EQ(packed.size(), 1u);
  auto [reference, ref_result] = model.Gradients(docs, {BackwardMode::kFull, 0, 0});
  const size_t floats = Flatten(reference).size();
  for (int p : {2, 4}) {
    for (const EngineOptions& options :
         {EngineOptions{BackwardMode::kStream, 5, 7}, EngineOptions{BackwardMode::kFull, 0, 0}}) {
      const std::string label = Label("packed tiny-qwen3", p, options);
      const std::vector<RankResult> ranks =
          RunOnGroup(*config, 3, packed, options, p, root_ + "/packed", floats);
      ASSERT_EQ(ranks.size(), static_cast<size_t>(p)) << label;
      EXPECT_NEAR(ranks[0].loss, ref_result.loss, 1e-5 * ref_result.loss) << label;
      ExpectSumClose(ranks, reference, 1e-4, label);
    }
  }
}

}  // namespace
}  // namespace sbp::testing
