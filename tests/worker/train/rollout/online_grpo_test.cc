// Online GRPO through the training loop: completions sampled from the
// current weights every step, scored, and trained on.
//  - a reward program speaking JSON lines gives the run the built-in
//    reward gives, bit for bit;
//  - a resumed run samples and trains exactly as an uninterrupted one;
//  - a failing reward program fails the run as bad input naming it, and
//    the checkpoints already written stay;
//  - the step's figures (reward mean/std, lengths, truncation, time split).
// That an untrained model learns from the rewards is tests/e2e/online_grpo_test.cc.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "tests/worker/train/trainer_fixture.h"
#include "worker/train/trainer.h"

namespace sbp::train_testing {
namespace {

constexpr int32_t kBos = 1, kSep = 2, kEos = 3, kFirstSymbol = 16, kSymbols = 8;

class OnlineGrpoTest : public TrainerFixture {
 protected:
  // `lines` reversal prompts of 3-5 symbols with their answers.
  void WritePrompts(int lines) {
    std::mt19937 rng(5);
    std::ofstream out(root_ / "prompts.jsonl");
    for (int i = 0; i < lines; ++i) {
      std::vector<int32_t> x(3 + rng() % 3);
      for (int32_t& s : x) s = kFirstSymbol + static_cast<int32_t>(rng() % kSymbols);
      std::vector<int32_t> prompt = {kBos};
      prompt.insert(prompt.end(), x.begin(), x.end());
      prompt.push_back(kSep);
      std::vector<int32_t> answer(x.rbegin(), x.rend());
      out << nlohmann::json{{"prompt_ids", prompt}, {"answer", answer}}.dump() << "\n";
    }
  }

  JobSpec OnlineSpec(const std::string& name, int steps) {
    WritePrompts(64);
    JobSpec spec = Spec(name);
    spec.data = (root_ / "prompts.jsonl").string();
    spec.objective = Objective::kGrpo;
    spec.seq_len = 32;
    spec.train.steps = steps;
    spec.train.sequences_per_step = 8;
    spec.train.micro_batch_sequences = 8;
    spec.train.lr = 3e-3;
    spec.train.schedule = LrSchedule::kConstant;
    spec.train.warmup_steps = 10;
    spec.train.weight_decay = 0;
    spec.train.seed = 1;
    spec.grpo.beta = 0;
    spec.grpo.rollout.group_size = 8;
    spec.grpo.rollout.max_new_tokens = 8;
    spec.grpo.rollout.eos_from_config = false;
    spec.grpo.rollout.eos_token_ids = {kEos};
    spec.grpo.reward.function = "token_match";
    spec.checkpoint.every_steps = 0;
    return spec;
  }

  // A program computing token_match (reward.h) from the JSON lines.
  std::string WriteTokenMatchProgram() {
    const fs::path path = root_ / "token_match.py";
    std::ofstream(path) << R"(import json, sys
for line in sys.stdin:
    item = json.loads(line)
    c, r = item["completion_ids"], item["fields"]["answer"]
    n = max(len(c), len(r))
    print(1.0 if n == 0 else sum(1 for a, b in zip(c, r) if a == b) / n)
)";
    return path.string();
  }
};

TEST_F(OnlineGrpoTest, ARewardProgramGivesTheBuiltInRunBitForBit) {
  const JobSpec builtin = OnlineSpec("builtin", 6);
  JobSpec program = OnlineSpec("program", 6);
  program.grpo.reward.function.clear();
  program.grpo.reward.command = {"python3", WriteTokenMatchProgram()};
  ASSERT_TRUE(RunTraining(builtin, {}, nullptr).ok());
  auto ran = RunTraining(program, {}, nullptr);
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(FinalWeights(builtin), FinalWeights(program));
  const auto a = Metrics(builtin), b = Metrics(program);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["reward_mean"], b[i]["reward_mean"]) << "step " << i + 1;
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;
  }
  // The figures of a step.
  const nlohmann::json& last = a.back();
  for (const char* key :
       {"reward_mean", "reward_std", "completion_length_mean", "completion_length_max",
        "truncated_fraction", "rollout_tokens_per_second", "rollout_seconds", "train_seconds",
        "rollout_tokens"}) {
    EXPECT_TRUE(last.contains(key)) << key << " in " << last.dump();
  }
  EXPECT_LE(last["completion_length_max"].get<int64_t>(), 8);
  EXPECT_GT(last["rollout_tokens"].get<int64_t>(), 0);
}

TEST_F(OnlineGrpoTest, ResumeSamplesAndTrainsAsAnUninterruptedRun) {
  const JobSpec straight = OnlineSpec("straight", 8);
  JobSpec interrupted = OnlineSpec("interrupted", 8);
  interrupted.checkpoint.every_steps = 3;
  ASSERT_TRUE(RunTraining(straight, {}, nullptr).ok());
  TrainOptions stop;
  stop.stop_after_step = 5;
  auto first = RunTraining(interrupted, stop, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = RunTraining(interrupted, {}, nullptr);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->first_step, 6);
  EXPECT_EQ(FinalWeights(straight), FinalWeights(interrupted));
  const auto a = Metrics(straight), b = Metrics(interrupted);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["reward_mean"], b[i]["reward_mean"]) << "step " << i + 1;
    EXPECT_EQ(a[i]["completion_length_mean"], b[i]["completion_length_mean"]) << "step " << i + 1;
  }
}

TEST_F(OnlineGrpoTest, AFailingRewardProgramIsBadInputAndKeepsTheCheckpoints) {
  // Rewards correctly for two steps, then exits 3 on the third call.
  const fs::path program = root_ / "flaky.sh";
  std::ofstream(program) << "#!/bin/sh\n"
                            "n=$(cat calls 2>/dev/null || echo 0); n=$((n+1)); echo $n > calls\n"
                            "if [ $n -ge 3 ]; then echo 'reward server down' >&2; exit 3; fi\n"
                            "while read line; do echo 0.5; done\n";
  ::chmod(program.c_str(), 0755);
  JobSpec spec = OnlineSpec("flaky", 6);
  spec.grpo.reward.function.clear();
  spec.grpo.reward.command = {program.string()};
  spec.checkpoint.every_steps = 1;
  auto ran = RunTraining(spec, {}, nullptr);
  ASSERT_FALSE(ran.ok());
  EXPECT_EQ(ran.status().code(), absl::StatusCode::kInvalidArgument) << ran.status();
  EXPECT_NE(ran.status().message().find("flaky.sh"), std::string::npos) << ran.status();
  EXPECT_NE(ran.status().message().find("reward server down"), std::string::npos) << ran.status();
  // Steps 1 and 2 were checkpointed, and the run resumes from step 2.
  EXPECT_TRUE(fs::exists(CheckpointPath(spec.checkpoint.dir, 2) + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(CheckpointPath(spec.checkpoint.dir, 3)));
  auto latest = FindLatestCheckpoint(spec.checkpoint.dir);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(**latest, CheckpointPath(spec.checkpoint.dir, 2));
}

TEST_F(OnlineGrpoTest, AWorkerThatRunsNoProgramsRefusesTheJob) {
  JobSpec spec = OnlineSpec("refused", 2);
  spec.grpo.reward.function.clear();
  spec.grpo.reward.command = {"python3", WriteTokenMatchProgram()};
  TrainOptions options;
  options.allow_reward_programs = false;
  auto ran = RunTraining(spec, options, nullptr);
  ASSERT_FALSE(ran.ok());
  EXPECT_EQ(ran.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ran.status().message().find("--allow-reward-programs"), std::string::npos)
      << ran.status();
}

TEST_F(OnlineGrpoTest, APromptThatLeavesNoRoomIsRefusedNamingTheLine) {
  JobSpec spec = OnlineSpec("long_prompt", 2);
  std::ofstream(root_ / "prompts.jsonl", std::ios::app)
      << nlohmann::json{{"prompt_ids", std::vector<int32_t>(30, 16)}, {"answer", {16}}}.dump()
      << "\n";
  auto ran = RunTraining(spec, {}, nullptr);
  ASSERT_FALSE(ran.ok());
  EXPECT_EQ(ran.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ran.status().message().find("prompts.jsonl:65"), std::string::npos) << ran.status();
  EXPECT_NE(ran.status().message().find("max_new_tokens"), std::string::npos) << ran.status();
}

}  // namespace
}  // namespace sbp::train_testing
