// DPO: log 2 at step 0, StreamBP == full backward, gradients == directional
// derivatives of an independent loss, and exact accumulation over
// micro-batches with the global pair count.
#include "worker/train/objectives/dpo.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "tests/worker/train/objectives/objectives_test_util.h"
#include "worker/engine/offload/checkpoint_store.h"

namespace sbp::objectives_testing {
namespace {

constexpr double kBeta = 0.5;
const EngineOptions kStream{BackwardMode::kStream, 3, 2};
const EngineOptions kFull{BackwardMode::kFull, 0, 0};

// A policy (model.weights) and a reference that differ by small noise.
struct DpoSetup {
  TestModel model;
  ParameterStore reference;
  std::vector<DpoPair> pairs;

  explicit DpoSetup(const std::string& preset, float noise = 0.01f)
      : model(*PresetConfig(preset), /*seed=*/7), reference(NewStore(model, "reference")) {
    CopyStore(model.weights, reference);
    if (noise > 0) {
      ParameterStore delta = NewStore(model, "noise");
      FillRandom(delta, 99, noise);
      AddScaled(model.weights, 1.0, delta);
    }
    // Prompts of 5, 4 and 1 tokens: masked spans cross the chunk boundaries.
    pairs = {MakePair(model.config, 5, 6, 4, 1), MakePair(model.config, 4, 3, 7, 2),
             MakePair(model.config, 1, 5, 5, 3)};
  }

  ModelTensors policy() { return BindModelTensors(model.weights); }
  ModelTensors ref() { return BindModelTensors(reference); }

  std::pair<ParameterStore, DpoResult> Gradients(EngineOptions options,
                                                 const std::vector<DpoPair>& batch,
                                                 double beta = kBeta, int64_t global = 0,
                                                 CheckpointStore* checkpoints = nullptr) {
    ParameterStore grads = NewStore(model, "gradients");
    ModelTensors g = BindModelTensors(grads);
    Engine engine(model.config, *model.backend, options);
    engine.set_checkpoint_store(checkpoints);
    Engine ref_engine(model.config, *model.backend, options);
    auto result = DpoForwardBackward(engine, policy(), ref_engine, ref(), batch, beta, global, g);
    CHECK_OK(result.status());
    return {std::move(grads), *std::move(result)};
  }

  // Independent DPO loss: per-token log-probs from Engine::Forward only.
  double NaiveLoss(const ModelTensors& policy_weights, double beta) {
    Engine engine(model.config, *model.backend, kFull);
    double loss = 0;
    for (const DpoPair& p : pairs) {
      const double pc = NaiveSum(NaiveLogProbs(engine, policy_weights, p.chosen));
      const double pr = NaiveSum(NaiveLogProbs(engine, policy_weights, p.rejected));
      const double rc = NaiveSum(NaiveLogProbs(engine, ref(), p.chosen));
      const double rr = NaiveSum(NaiveLogProbs(engine, ref(), p.rejected));
      const double m = beta * ((pc - rc) - (pr - rr));
      loss += std::log1p(std::exp(-m));
    }
    return loss / static_cast<double>(pairs.size());
  }
};

TEST(Dpo, IdenticalPolicyAndReferenceGiveLog2) {
  DpoSetup setup("tiny-qwen3", /*noise=*/0.0f);
  auto [grads, result] = setup.Gradients(kStream, setup.pairs);
  EXPECT_NEAR(result.loss, std::log(2.0), 1e-6);
  EXPECT_EQ(result.reward_accuracy(), 0.0);
  ASSERT_EQ(result.pairs.size(), setup.pairs.size());
  for (const DpoPairStats& s : result.pairs) {
    EXPECT_NEAR(s.margin, 0.0, 1e-9);
    EXPECT_NEAR(s.chosen_reward, 0.0, 1e-9);
    EXPECT_LT(s.policy_chosen, 0.0);
  }
  // The gradient at m = 0 is -beta/2N (grad pi_c - grad pi_r): not zero.
  EXPECT_GT(cpu::SumSquares(grads.groups()[0].flat), 0.0);
}

TEST(Dpo, StreamEqualsFull) {
  for (const std::string preset : {"tiny-qwen3", "tiny-llama", "tiny-qwen2"}) {
    DpoSetup setup(preset);
    auto [full, full_result] = setup.Gradients(kFull, setup.pairs);
    auto [stream, stream_result] = setup.Gradients(kStream, setup.pairs);
    EXPECT_NEAR(stream_result.loss, full_result.loss, 1e-6) << preset;
    ExpectGradientsClose(stream, full, 1e-5, preset + " stream 3/2 vs full");
  }
}

// Layer checkpoints in host memory or on disk change where they wait, not
// one bit of the loss or the gradients.
TEST(Dpo, CheckpointTiersAreBitIdentical) {
  DpoSetup setup("tiny-llama");
  auto [device, device_result] = setup.Gradients(kStream, setup.pairs);
  auto host = NewHostCheckpointStore(*setup.model.backend);
  const std::string dir = ::testing::TempDir() + "/dpo_disk_tier";
  std::filesystem::create_directories(dir);
  auto disk = NewDiskCheckpointStore(*setup.model.backend, dir);
  ASSERT_TRUE(disk.ok()) << disk.status();
  for (CheckpointStore* store : {host.get(), disk->get()}) {
    auto [grads, result] = setup.Gradients(kStream, setup.pairs, kBeta, 0, store);
    EXPECT_EQ(result.loss, device_result.loss);
    ExpectGradientsClose(grads, device, 0.0, std::string(CheckpointTierName(store->tier())));
  }
}

TEST(Dpo, GradientMatchesDirectionalDerivativesOfNaiveLoss) {
  DpoSetup setup("tiny-qwen3");
  auto [grads, result] = setup.Gradients(kStream, setup.pairs);
  auto naive = [&](const ModelTensors& w) { return setup.NaiveLoss(w, kBeta); };
  EXPECT_NEAR(naive(setup.policy()), result.loss, 1e-6);
  const double err =
      WorstDirectionalError(setup.model, setup.model.weights, grads, 3, 0.02f, 0.02, naive, 11);
  EXPECT_LT(err, 1e-3);

  // The check has teeth: a coefficient off by 2x (wrong N) or a wrong beta
  // inside the coefficient fails it.
  auto [halved, r1] = setup.Gradients(kStream, setup.pairs, kBeta, 2 * setup.pairs.size());
  EXPECT_GT(
      WorstDirectionalError(setup.model, setup.model.weights, halved, 1, 0.02f, 0.02, naive, 11),
      0.3);
  auto [wrong_beta, r2] = setup.Gradients(kStream, setup.pairs, 1.1 * kBeta);
  EXPECT_GT(WorstDirectionalError(setup.model, setup.model.weights, wrong_beta, 1, 0.02f, 0.02,
                                  naive, 11),
            1e-2);
}

TEST(Dpo, MicroBatchesWithGlobalCountEqualOneCall) {
  DpoSetup setup("tiny-llama");
  auto [whole, whole_result] = setup.Gradients(kStream, setup.pairs);

  ParameterStore grads = NewStore(setup.model, "gradients");
  ModelTensors g = BindModelTensors(grads);
  Engine engine(setup.model.config, *setup.model.backend, kStream);
  Engine ref_engine(setup.model.config, *setup.model.backend, kFull);
  // Reference log-probs computed once and cached, as a trainer does.
  auto reference = ComputeReferenceLogProbs(ref_engine, setup.ref(), setup.pairs);
  ASSERT_TRUE(reference.ok()) << reference.status();
  const int64_t n = static_cast<int64_t>(setup.pairs.size());
  double loss = 0;
  for (auto [begin, end] : {std::pair<int, int>{0, 1}, {1, 3}}) {
    std::vector<DpoPair> micro(setup.pairs.begin() + begin, setup.pairs.begin() + end);
    std::vector<ReferenceLogProbs> ref(reference->begin() + begin, reference->begin() + end);
    auto r = DpoForwardBackward(engine, setup.policy(), micro, ref, kBeta, n, g);
    ASSERT_TRUE(r.ok()) << r.status();
    loss += r->loss;
  }
  EXPECT_NEAR(loss, whole_result.loss, 1e-6);
  ExpectGradientsClose(grads, whole, 1e-6, "two micro-batches");

  // Evaluation path: same loss, no gradient.
  auto eval = DpoForward(engine, setup.policy(), setup.pairs, *reference, kBeta, 0);
  ASSERT_TRUE(eval.ok());
  EXPECT_NEAR(eval->loss, whole_result.loss, 1e-6);
  EXPECT_EQ(eval->reward_accuracy(), whole_result.reward_accuracy());
}

TEST(Dpo, RejectsBadArguments) {
  DpoSetup setup("tiny-qwen3");
  ParameterStore grads = NewStore(setup.model, "gradients");
  ModelTensors g = BindModelTensors(grads);
  Engine engine(setup.model.config, *setup.model.backend, kStream);
  std::vector<ReferenceLogProbs> ref(setup.pairs.size());
  EXPECT_EQ(DpoForwardBackward(engine, setup.policy(), setup.pairs, ref, 0.0, 0, g).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      DpoForwardBackward(engine, setup.policy(), setup.pairs, ref, kBeta, 1, g).status().code(),
      absl::StatusCode::kInvalidArgument);
  ref.pop_back();
  EXPECT_EQ(
      DpoForwardBackward(engine, setup.policy(), setup.pairs, ref, kBeta, 0, g).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sbp::objectives_testing
