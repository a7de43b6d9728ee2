// GRPO: advantages, StreamBP == full backward, gradients == directional
// derivatives of an independent loss for every normaliser, clipping, zero
// advantages, normaliser scalings, no reference forward at beta = 0, and
// exact accumulation over micro-batches with global counts.
#include "worker/train/objectives/grpo.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "tests/worker/train/objectives/objectives_test_util.h"
#include "worker/engine/offload/checkpoint_store.h"

namespace sbp::objectives_testing {
namespace {

const EngineOptions kStream{BackwardMode::kStream, 3, 2};
const EngineOptions kFull{BackwardMode::kFull, 0, 0};

GrpoOptions Options(GrpoLoss loss, double beta = 0.1, double epsilon = 0.2,
                    int64_t max_completion_length = 0) {
  GrpoOptions o;
  o.loss = loss;
  o.beta = beta;
  o.epsilon = epsilon;
  o.max_completion_length = max_completion_length;
  return o;
}

// Offsets o_t - x_t for off-policy completions, cycling: rho = exp(-offset)
// is 1, 0.61 (below 0.8), 1.65 (above 1.2), 0.90 and 1.35 — each at least
// 0.1 in log space from the clip boundaries, so small perturbations of the
// weights never cross a kink.
constexpr float kOffsets[] = {0.0f, 0.5f, -0.5f, 0.1f, -0.3f};

struct GrpoSetup {
  TestModel model;
  ParameterStore reference;
  std::vector<GrpoGroup> groups;
  // Independent per-position values: old log-probs (fixed: for on-policy
  // completions the policy's log-probs at the starting weights) and
  // reference log-probs, per group and completion.
  std::vector<std::vector<std::vector<double>>> old, ref_lp;

  explicit GrpoSetup(const std::string& preset)
      : model(*PresetConfig(preset), /*seed=*/5), reference(NewStore(model, "reference")) {
    CopyStore(model.weights, reference);
    ParameterStore delta = NewStore(model, "noise");
    FillRandom(delta, 77, 0.01f);
    AddScaled(model.weights, 1.0, delta);
    const ModelConfig& c = model.config;
    groups = {MakeGroup(c, 4, {5, 3, 6}, {1.0, 0.0, 0.5}, 1),  // off-policy (below)
              MakeGroup(c, 2, {4, 4}, {0.0, 1.0}, 2),          // on-policy
              MakeGroup(c, 3, {5}, {2.0}, 3)};                 // one completion: A = 0
    Engine engine(c, *model.backend, kFull);
    for (GrpoCompletion& completion : groups[0].completions) {
      const std::vector<double> lp =
          NaiveLogProbs(engine, policy(), PromptResponse(groups[0].prompt, completion.ids));
      const size_t p = groups[0].prompt.size();
      for (size_t j = 0; j < completion.ids.size(); ++j) {
        completion.old_logprobs.push_back(static_cast<float>(lp[p + j - 1]) + kOffsets[j % 5]);
      }
    }
    RecomputeFixedValues();
  }

  void RecomputeFixedValues() {
    Engine engine(model.config, *model.backend, kFull);
    old.assign(groups.size(), {});
    ref_lp.assign(groups.size(), {});
    for (size_t g = 0; g < groups.size(); ++g) {
      const GrpoGroup& group = groups[g];
      const size_t p = group.prompt.size();
      for (const GrpoCompletion& completion : group.completions) {
        const TokenSequence s = PromptResponse(group.prompt, completion.ids);
        std::vector<double> o = NaiveLogProbs(engine, policy(), s);
        if (!completion.old_logprobs.empty()) {
          for (size_t j = 0; j < completion.ids.size(); ++j) {
            if (p + j >= 1) o[p + j - 1] = completion.old_logprobs[j];
          }
        }
        old[g].push_back(std::move(o));
        ref_lp[g].push_back(NaiveLogProbs(engine, ref(), s));
      }
    }
  }

  ModelTensors policy() { return BindModelTensors(model.weights); }
  ModelTensors ref() { return BindModelTensors(reference); }

  std::pair<ParameterStore, GrpoResult> Gradients(EngineOptions engine_options,
                                                  const GrpoOptions& options,
                                                  const std::vector<GrpoGroup>& batch,
                                                  const GrpoCounts* global = nullptr,
                                                  CheckpointStore* checkpoints = nullptr) {
    ParameterStore grads = NewStore(model, "gradients");
    ModelTensors g = BindModelTensors(grads);
    Engine engine(model.config, *model.backend, engine_options);
    engine.set_checkpoint_store(checkpoints);
    Engine ref_engine(model.config, *model.backend, engine_options);
    const GrpoCounts counts = global != nullptr ? *global : CountGrpo(batch);
    ModelTensors r = ref();
    auto result = GrpoForwardBackward(engine, policy(), &ref_engine, &r, batch, options, counts, g);
    CHECK_OK(result.status());
    return {std::move(grads), *std::move(result)};
  }

  // The GRPO loss of `groups` written from the definition, with per-token
  // log-probs from Engine::Forward only.
  double NaiveLoss(const ModelTensors& weights, const GrpoOptions& o) {
    Engine engine(model.config, *model.backend, kFull);
    int64_t sequences = 0, tokens = 0, longest = 0;
    for (const GrpoGroup& group : groups) {
      for (const GrpoCompletion& completion : group.completions) {
        const TokenSequence s = PromptResponse(group.prompt, completion.ids);
        int64_t n = 0;
        for (size_t t = 1; t < s.labels.size(); ++t) n += s.labels[t] != kIgnoreIndex;
        ++sequences;
        tokens += n;
        longest = std::max(longest, n);
      }
    }
    const double l_max =
        static_cast<double>(o.max_completion_length > 0 ? o.max_completion_length : longest);
    double loss = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      const GrpoGroup& group = groups[g];
      const size_t size = group.completions.size();
      double mean = 0, var = 0;
      for (const GrpoCompletion& c : group.completions) mean += c.reward / size;
      for (const GrpoCompletion& c : group.completions) {
        var += (c.reward - mean) * (c.reward - mean);
      }
      const double sd = size > 1 ? std::sqrt(var / (size - 1)) : 0.0;
      for (size_t i = 0; i < size; ++i) {
        const double a = size > 1 ? (group.completions[i].reward - mean) / (sd + 1e-4) : 0.0;
        const TokenSequence s = PromptResponse(group.prompt, group.completions[i].ids);
        const std::vector<double> x = NaiveLogProbs(engine, weights, s);
        double sum = 0;
        int64_t n = 0;
        for (size_t t = 0; t + 1 < s.labels.size(); ++t) {
          if (s.labels[t + 1] == kIgnoreIndex) continue;
          ++n;
          const double rho = std::exp(x[t] - old[g][i][t]);
          const double clipped = std::min(std::max(rho, 1 - o.epsilon), 1 + o.epsilon);
          const double delta = ref_lp[g][i][t] - x[t];
          sum += -std::min(rho * a, clipped * a) + o.beta * (std::exp(delta) - delta - 1);
        }
        if (n == 0) continue;
        switch (o.loss) {
          case GrpoLoss::kGrpo:
            loss += sum / n / sequences;
            break;
          case GrpoLoss::kBnpo:
            loss += sum / tokens;
            break;
          case GrpoLoss::kDrGrpo:
            loss += sum / (sequences * l_max);
            break;
        }
      }
    }
    return loss;
  }
};

TEST(Grpo, AdvantagesUseTheSampleStandardDeviation) {
  GrpoGroup group;
  for (double r : {1.0, 0.0, 0.0, 1.0}) group.completions.push_back({{1}, r, {}});
  const double a = 0.5 / (std::sqrt(1.0 / 3.0) + 1e-4);  // sample std of {1,0,0,1}
  const std::vector<double> adv = GrpoAdvantages(group);
  ASSERT_EQ(adv.size(), 4u);
  EXPECT_NEAR(adv[0], a, 1e-12);
  EXPECT_NEAR(adv[1], -a, 1e-12);
  EXPECT_NEAR(adv[2], -a, 1e-12);
  EXPECT_NEAR(adv[3], a, 1e-12);

  GrpoGroup ramp;
  for (double r : {1.0, 2.0, 3.0}) ramp.completions.push_back({{1}, r, {}});
  EXPECT_NEAR(GrpoAdvantages(ramp)[0], -1.0 / (1.0 + 1e-4), 1e-12);
  EXPECT_EQ(GrpoAdvantages(ramp)[1], 0.0);

  GrpoGroup equal;
  for (double r : {2.0, 2.0, 2.0}) equal.completions.push_back({{1}, r, {}});
  for (double v : GrpoAdvantages(equal)) EXPECT_EQ(v, 0.0);
  GrpoGroup single;
  single.completions.push_back({{1}, 5.0, {}});
  EXPECT_EQ(GrpoAdvantages(single), std::vector<double>{0.0});
}

TEST(Grpo, CountsCompletionTargets) {
  GrpoGroup a;
  a.prompt = {1, 2};
  a.completions = {{{3, 4, 5}, 0, {}}, {{6}, 0, {}}};
  GrpoGroup b;  // empty prompt: the first completion token has no target
  b.completions = {{{3, 4, 5, 6}, 0, {}}};
  GrpoCounts counts = CountGrpo({a, b});
  EXPECT_EQ(counts.sequences, 3);
  EXPECT_EQ(counts.completion_tokens, 3 + 1 + 3);
  EXPECT_EQ(counts.max_completion_length, 3);
  EXPECT_EQ(CountValidTargets(GrpoSequence(b, 0)), 3);
  GrpoCounts sum = CountGrpo({a});
  sum += CountGrpo({b});
  EXPECT_EQ(sum.sequences, counts.sequences);
  EXPECT_EQ(sum.completion_tokens, counts.completion_tokens);
  EXPECT_EQ(sum.max_completion_length, counts.max_completion_length);
}

TEST(Grpo, StreamEqualsFull) {
  for (const std::string preset : {"tiny-qwen3", "tiny-qwen2"}) {
    GrpoSetup setup(preset);
    for (GrpoLoss loss : {GrpoLoss::kGrpo, GrpoLoss::kBnpo, GrpoLoss::kDrGrpo}) {
      const std::string label = preset + " " + std::string(GrpoLossName(loss));
      auto [full, full_result] = setup.Gradients(kFull, Options(loss), setup.groups);
      auto [stream, stream_result] = setup.Gradients(kStream, Options(loss), setup.groups);
      EXPECT_NEAR(stream_result.loss, full_result.loss, 1e-6) << label;
      EXPECT_EQ(stream_result.clipped_tokens, full_result.clipped_tokens) << label;
      ExpectGradientsClose(stream, full, 1e-5, label);
    }
  }
}

// Layer checkpoints in host memory or on disk change where they wait, not
// one bit of the loss or the gradients.
TEST(Grpo, CheckpointTiersAreBitIdentical) {
  GrpoSetup setup("tiny-qwen3");
  const GrpoOptions options = Options(GrpoLoss::kGrpo);
  auto [device, device_result] = setup.Gradients(kStream, options, setup.groups);
  auto host = NewHostCheckpointStore(*setup.model.backend);
  const std::string dir = ::testing::TempDir() + "/grpo_disk_tier";
  std::filesystem::create_directories(dir);
  auto disk = NewDiskCheckpointStore(*setup.model.backend, dir);
  ASSERT_TRUE(disk.ok()) << disk.status();
  for (CheckpointStore* store : {host.get(), disk->get()}) {
    auto [grads, result] = setup.Gradients(kStream, options, setup.groups, nullptr, store);
    EXPECT_EQ(result.loss, device_result.loss);
    EXPECT_EQ(result.clipped_tokens, device_result.clipped_tokens);
    ExpectGradientsClose(grads, device, 0.0, std::string(CheckpointTierName(store->tier())));
  }
}

TEST(Grpo, GradientMatchesDirectionalDerivativesOfNaiveLoss) {
  GrpoSetup setup("tiny-qwen3");
  for (GrpoLoss loss : {GrpoLoss::kGrpo, GrpoLoss::kBnpo, GrpoLoss::kDrGrpo}) {
    const std::string label(GrpoLossName(loss));
    const GrpoOptions options = Options(loss);
    auto [grads, result] = setup.Gradients(kStream, options, setup.groups);
    EXPECT_GT(result.clipped_tokens, 0) << label;
    EXPECT_LT(result.clipped_tokens, result.completion_tokens) << label;
    auto naive = [&](const ModelTensors& w) { return setup.NaiveLoss(w, options); };
    EXPECT_NEAR(naive(setup.policy()), result.loss, 1e-6) << label;
    EXPECT_LT(
        WorstDirectionalError(setup.model, setup.model.weights, grads, 2, 0.02f, 0.02, naive, 21),
        1e-3)
        << label;
  }
  // The check has teeth: a wrong normaliser or a wrong clip range fails it.
  const GrpoOptions options = Options(GrpoLoss::kGrpo);
  auto naive = [&](const ModelTensors& w) { return setup.NaiveLoss(w, options); };
  GrpoCounts doubled = CountGrpo(setup.groups);
  doubled.sequences *= 2;
  auto [halved, r1] = setup.Gradients(kStream, options, setup.groups, &doubled);
  EXPECT_GT(
      WorstDirectionalError(setup.model, setup.model.weights, halved, 1, 0.02f, 0.02, naive, 21),
      0.3);
  auto [wide, r2] = setup.Gradients(kStream, Options(GrpoLoss::kGrpo, 0.1, 0.5), setup.groups);
  EXPECT_GT(
      WorstDirectionalError(setup.model, setup.model.weights, wide, 1, 0.02f, 0.02, naive, 21),
      1e-2);
}

TEST(Grpo, EqualRewardsGiveNoPolicyGradient) {
  GrpoSetup setup("tiny-llama");
  std::vector<GrpoGroup> batch = {setup.groups[0], setup.groups[1]};
  for (GrpoGroup& g : batch) {
    for (GrpoCompletion& c : g.completions) c.reward = 1.5;
  }
  auto [grads, result] = setup.Gradients(kStream, Options(GrpoLoss::kGrpo, /*beta=*/0.0), batch);
  EXPECT_EQ(result.loss, 0.0);
  EXPECT_EQ(result.clipped_tokens, 0);
  EXPECT_NEAR(result.mean_reward(), 1.5, 1e-12);
  for (const ParameterGroup& g : grads.groups()) {
    EXPECT_EQ(cpu::SumSquares(g.flat), 0.0) << g.name;
  }
  // With beta > 0 only the KL term remains: non-zero, and its value is the
  // KL mean weighted by the normaliser.
  auto [kl_grads, kl_result] = setup.Gradients(kStream, Options(GrpoLoss::kBnpo, 0.1), batch);
  EXPECT_GT(kl_result.kl_sum, 0.0);
  EXPECT_NEAR(kl_result.loss, 0.1 * kl_result.mean_kl(), 1e-9);
  EXPECT_GT(cpu::SumSquares(kl_grads.groups()[0].flat), 0.0);
}

TEST(Grpo, ClippedTokensHaveNoGradient) {
  GrpoSetup setup("tiny-qwen3");
  // Two completions, A = +a and -a. Old log-probs 2 nats below the current
  // ones (rho = e^2 > 1 + eps) for the positive advantage, 2 nats above
  // (rho = e^-2 < 1 - eps) for the negative one: every token is clipped.
  GrpoGroup group = MakeGroup(setup.model.config, 3, {4, 5}, {1.0, 0.0}, 9);
  Engine engine(setup.model.config, *setup.model.backend, kFull);
  auto set_old = [&](GrpoCompletion& c, float offset) {
    const std::vector<double> lp =
        NaiveLogProbs(engine, setup.policy(), PromptResponse(group.prompt, c.ids));
    c.old_logprobs.clear();
    for (size_t j = 0; j < c.ids.size(); ++j) {
      c.old_logprobs.push_back(static_cast<float>(lp[group.prompt.size() + j - 1]) + offset);
    }
  };
  set_old(group.completions[0], -2.0f);
  set_old(group.completions[1], 2.0f);
  const double eps = 0.2;
  auto [grads, result] =
      setup.Gradients(kStream, Options(GrpoLoss::kGrpo, /*beta=*/0.0, eps), {group});
  EXPECT_EQ(result.clipped_tokens, result.completion_tokens);
  EXPECT_EQ(result.clip_fraction(), 1.0);
  for (const ParameterGroup& g : grads.groups()) {
    EXPECT_EQ(cpu::SumSquares(g.flat), 0.0) << g.name;
  }
  // Each token contributes -clip(rho) A: (-(1 + eps) a - (1 - eps)(-a)) / 2.
  const double a = 0.5 / (std::sqrt(0.5) + 1e-4);
  EXPECT_NEAR(result.loss, -eps * a, 1e-9);

  // The opposite offsets leave every token inside its active branch.
  set_old(group.completions[0], 2.0f);
  set_old(group.completions[1], -2.0f);
  auto [active, active_result] =
      setup.Gradients(kStream, Options(GrpoLoss::kGrpo, 0.0, eps), {group});
  EXPECT_EQ(active_result.clipped_tokens, 0);
  EXPECT_GT(cpu::SumSquares(active.groups()[0].flat), 0.0);
}

TEST(Grpo, NormalisersScaleAsDocumented) {
  GrpoSetup setup("tiny-qwen3");
  auto scaled = [&](const ParameterStore& g, double s) {
    ParameterStore out = NewStore(setup.model, "scaled");
    AddScaled(out, s, g);
    return out;
  };
  // Unequal lengths: bnpo * N_tok == dr_grpo * S * L_max (both the plain sum).
  const GrpoCounts counts = CountGrpo(setup.groups);
  auto [bnpo, bnpo_result] = setup.Gradients(kStream, Options(GrpoLoss::kBnpo), setup.groups);
  auto [dr, dr_result] = setup.Gradients(kStream, Options(GrpoLoss::kDrGrpo), setup.groups);
  const double n_tok = static_cast<double>(counts.completion_tokens);
  const double s_l = static_cast<double>(counts.sequences * counts.max_completion_length);
  EXPECT_NEAR(bnpo_result.loss * n_tok, dr_result.loss * s_l, 1e-6);
  ExpectGradientsClose(scaled(bnpo, n_tok), scaled(dr, s_l), 1e-6, "bnpo vs dr_grpo");

  // Equal lengths n: grpo == bnpo, and dr_grpo with L_max = 2n is half.
  std::vector<GrpoGroup> equal = {setup.groups[1]};
  auto [grpo_eq, grpo_eq_result] = setup.Gradients(kStream, Options(GrpoLoss::kGrpo), equal);
  auto [bnpo_eq, bnpo_eq_result] = setup.Gradients(kStream, Options(GrpoLoss::kBnpo), equal);
  auto [dr_eq, dr_eq_result] =
      setup.Gradients(kStream, Options(GrpoLoss::kDrGrpo, 0.1, 0.2, 8), equal);
  EXPECT_NEAR(grpo_eq_result.loss, bnpo_eq_result.loss, 1e-9);
  EXPECT_NEAR(dr_eq_result.loss, 0.5 * grpo_eq_result.loss, 1e-9);
  ExpectGradientsClose(grpo_eq, bnpo_eq, 1e-6, "grpo vs bnpo");
  ExpectGradientsClose(scaled(dr_eq, 2.0), grpo_eq, 1e-6, "dr_grpo(2n) vs grpo");
}

TEST(Grpo, BetaZeroRunsNoReference) {
  GrpoSetup setup("tiny-qwen3");
  const GrpoOptions options = Options(GrpoLoss::kGrpo, /*beta=*/0.0);
  const GrpoCounts counts = CountGrpo(setup.groups);
  Engine engine(setup.model.config, *setup.model.backend, kStream);
  ParameterStore grads = NewStore(setup.model, "gradients");
  ModelTensors g = BindModelTensors(grads);
  // No reference model at all: nothing to run a forward through.
  auto result = GrpoForwardBackward(engine, setup.policy(), nullptr, nullptr, setup.groups, options,
                                    counts, g);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->kl_sum, 0.0);
  auto [with_ref, with_ref_result] = setup.Gradients(kStream, options, setup.groups);
  EXPECT_EQ(result->loss, with_ref_result.loss);
  ExpectGradientsClose(grads, with_ref, 0.0, "beta 0 with and without a reference");

  // beta > 0 needs one.
  EXPECT_EQ(GrpoForwardBackward(engine, setup.policy(), nullptr, nullptr, setup.groups,
                                Options(GrpoLoss::kGrpo, 0.1), counts, g)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GrpoForwardBackward(engine, setup.policy(), setup.groups, nullptr,
                                Options(GrpoLoss::kGrpo, 0.1), counts, g)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Grpo, MicroBatchesWithGlobalCountsEqualOneCall) {
  GrpoSetup setup("tiny-llama");
  const GrpoCounts counts = CountGrpo(setup.groups);
  Engine engine(setup.model.config, *setup.model.backend, kStream);
  Engine ref_engine(setup.model.config, *setup.model.backend, kFull);
  auto reference = ComputeGrpoReferenceLogProbs(ref_engine, setup.ref(), setup.groups);
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (GrpoLoss loss : {GrpoLoss::kGrpo, GrpoLoss::kDrGrpo}) {
    const std::string label(GrpoLossName(loss));
    auto [whole, whole_result] = setup.Gradients(kStream, Options(loss), setup.groups);
    ParameterStore grads = NewStore(setup.model, "gradients");
    ModelTensors g = BindModelTensors(grads);
    double total = 0;
    int64_t clipped = 0;
    for (auto [begin, end] : {std::pair<int, int>{0, 1}, {1, 3}}) {
      std::vector<GrpoGroup> micro(setup.groups.begin() + begin, setup.groups.begin() + end);
      GrpoReferenceLogProbs ref;
      ref.logprobs.assign(reference->logprobs.begin() + begin, reference->logprobs.begin() + end);
      auto r = GrpoForwardBackward(engine, setup.policy(), micro, &ref, Options(loss), counts, g);
      ASSERT_TRUE(r.ok()) << r.status();
      total += r->loss;
      clipped += r->clipped_tokens;
    }
    EXPECT_NEAR(total, whole_result.loss, 1e-9) << label;
    EXPECT_EQ(clipped, whole_result.clipped_tokens) << label;
    ExpectGradientsClose(grads, whole, 1e-6, label + " two micro-batches");

    auto eval =
        GrpoForward(engine, setup.policy(), setup.groups, &*reference, Options(loss), counts);
    ASSERT_TRUE(eval.ok());
    EXPECT_NEAR(eval->loss, whole_result.loss, 1e-6) << label;
  }
  // Counts smaller than the batch's are an error.
  ParameterStore grads = NewStore(setup.model, "gradients");
  ModelTensors g = BindModelTensors(grads);
  GrpoCounts partial = CountGrpo({setup.groups[0]});
  EXPECT_EQ(GrpoForwardBackward(engine, setup.policy(), setup.groups, &*reference,
                                Options(GrpoLoss::kGrpo), partial, g)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sbp::objectives_testing
