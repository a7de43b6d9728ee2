// Online GRPO end to end through the real binaries:
//  - `sbp run examples/jobs/tiny-grpo-online.yaml` on the untrained tiny
//    model: the reward mean climbs from about 0 to above 0.8, on the watch
//    line and in metrics.jsonl;
//  - a reward program trains exactly as the built-in function does;
//  - `sbp generate` on the trained checkpoint reverses the prompts;
//  - two ZeRO-2 workers sample and train as one worker does.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "nlohmann/json.hpp"
#include "tests/e2e/cluster_test_util.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> JsonLines(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

double MeanReward(const std::vector<nlohmann::json>& lines, size_t first, size_t last) {
  double sum = 0;
  for (size_t i = first; i < last; ++i) sum += lines[i]["reward_mean"].get<double>();
  return sum / static_cast<double>(last - first);
}

// The example job, pointed at the cluster's tiny model (the same preset and
// seed as examples/models/tiny-qwen3) and a copy of its prompts.
std::string ExampleJob(Cluster& c, const std::string& name, const std::string& reward = "") {
  std::string spec = ReadAll(SourceDir() + "/examples/jobs/tiny-grpo-online.yaml");
  EXPECT_FALSE(spec.empty());
  fs::copy_file(SourceDir() + "/examples/data/tiny-grpo-prompts.jsonl", c.dir() / "prompts.jsonl",
                fs::copy_options::overwrite_existing);
  spec = std::regex_replace(spec, std::regex("model: examples/models/tiny-qwen3"), "model: model");
  spec = std::regex_replace(spec, std::regex("data: examples/data/tiny-grpo-prompts.jsonl"),
                            "data: prompts.jsonl");
  spec = std::regex_replace(spec, std::regex("name: tiny-grpo-online"), "name: " + name);
  spec = std::regex_replace(spec, std::regex("checkpoint: \\{every_steps: 50"),
                            "checkpoint: {dir: runs/" + name + ", every_steps: 50");
  if (!reward.empty()) {
    spec = std::regex_replace(spec, std::regex("  reward: \\{function: token_match[^\n]*"),
                              "  reward: " + reward);
  }
  return spec;
}

void ExpectLearned(Cluster& c, const std::string& name, const CommandResult& r) {
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // The watch line shows the reward.
  EXPECT_NE(r.err.find("reward "), std::string::npos) << r.err;
  const std::vector<nlohmann::json> lines = JsonLines(c.dir() / "runs" / name / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 200u);
  const double start = MeanReward(lines, 0, 10), end = MeanReward(lines, 180, 200);
  EXPECT_LT(start, 0.1);
  EXPECT_GT(end, 0.8) << "the reward mean went from " << start;
}

TEST(OnlineGrpoTest, TheExampleLearnsToReverseFromRewardsAloneAndGenerates) {
  Cluster c("online_grpo_learns");
  c.WriteSpec("online", ExampleJob(c, "online"));
  const CommandResult r = RunCommand(SbpBinary() + " run online.yaml", c.dir());
  ExpectLearned(c, "online", r);

  // Greedy decoding of the trained checkpoint reverses the prompts.
  const CommandResult g = RunCommand(
      SbpBinary() +
          " generate --model runs/online/checkpoints/step-00000200 --prompts prompts.jsonl"
          " --max-new-tokens 3 --temperature 0 --eos-token-id 3 --out completions.jsonl",
      c.dir());
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const nlohmann::json summary = nlohmann::json::parse(g.err.substr(g.err.rfind('{')));
  EXPECT_EQ(summary["completions"], 512) << g.err;
  const std::vector<nlohmann::json> out = JsonLines(c.dir() / "completions.jsonl");
  ASSERT_EQ(out.size(), 512u);
  int right = 0, tokens = 0;
  for (const nlohmann::json& line : out) {
    ASSERT_EQ(line["completion_ids"].size(), line["logprobs"].size()) << line.dump();
    ASSERT_TRUE(line.contains("answer")) << "the prompt's fields are kept: " << line.dump();
    EXPECT_EQ(line["finish_reason"], "length") << line.dump();
    const auto& ids = line["completion_ids"];
    const auto& answer = line["answer"];
    for (size_t t = 0; t < std::min(ids.size(), answer.size()); ++t) right += ids[t] == answer[t];
    tokens += static_cast<int>(answer.size());
  }
  // Greedy decoding puts the right symbol at most positions.
  EXPECT_GT(right, 0.9 * tokens) << right << " of " << tokens << " symbols";
}

// A reward program computing token_match gives the very rewards, losses and
// weights of the built-in function, step by step (a short run of each).
TEST(OnlineGrpoTest, ARewardProgramTrainsAsTheBuiltInFunctionDoes) {
  Cluster c("online_grpo_program");
  WriteFile(c.dir() / "token_match.py", R"(import json, sys
for line in sys.stdin:
    item = json.loads(line)
    c, r = item["completion_ids"], item["fields"]["answer"]
    n = max(len(c), len(r))
    print(json.dumps({"reward": 1.0 if n == 0 else sum(a == b for a, b in zip(c, r)) / n}))
)");
  const auto shorten = [](std::string spec) {
    spec = std::regex_replace(spec, std::regex("steps: 200"), "steps: 6");
    return std::regex_replace(spec, std::regex("warmup_steps: 10"), "warmup_steps: 1");
  };
  c.WriteSpec("builtin", shorten(ExampleJob(c, "builtin")));
  c.WriteSpec("program",
              shorten(ExampleJob(c, "program", "{command: [python3, ../../token_match.py]}")));
  for (const char* name : {"builtin", "program"}) {
    const CommandResult r = RunCommand(SbpBinary() + " run " + name + ".yaml", c.dir());
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.out << r.err;
  }
  const std::vector<nlohmann::json> builtin = JsonLines(c.dir() / "runs/builtin/metrics.jsonl");
  const std::vector<nlohmann::json> program = JsonLines(c.dir() / "runs/program/metrics.jsonl");
  ASSERT_EQ(builtin.size(), 6u);
  ASSERT_EQ(program.size(), 6u);
  double rewarded = 0;
  for (size_t i = 0; i < builtin.size(); ++i) {
    for (const char* key : {"reward_mean", "reward_std", "loss", "grad_norm"}) {
      EXPECT_EQ(builtin[i][key], program[i][key]) << key << " at step " << i + 1;
    }
    rewarded += builtin[i]["reward_mean"].get<double>();
  }
  // Not a vacuous match: some completions were rewarded.
  EXPECT_GT(rewarded, 0.0);
}

TEST(OnlineGrpoTest, TwoZeroTwoWorkersSampleAndTrainAsOne) {
  Cluster c("online_grpo_zero2");
  std::string one = ExampleJob(c, "one");
  one = std::regex_replace(one, std::regex("steps: 200"), "steps: 4");
  one = std::regex_replace(one, std::regex("warmup_steps: 10"), "warmup_steps: 1");
  std::string two = ExampleJob(c, "two");
  two = std::regex_replace(two, std::regex("steps: 200"), "steps: 4");
  two = std::regex_replace(two, std::regex("warmup_steps: 10"), "warmup_steps: 1");
  two = std::regex_replace(two, std::regex("world_size: 1"), "world_size: 2");
  c.WriteSpec("one", one);
  c.WriteSpec("two", two);
  const std::string env = "OMP_NUM_THREADS=1 ";
  const CommandResult a = RunCommand(env + SbpBinary() + " run one.yaml", c.dir());
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const CommandResult b = RunCommand(env + SbpBinary() + " run two.yaml --workers 2", c.dir());
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto x = JsonLines(c.dir() / "runs/one/metrics.jsonl");
  const auto y = JsonLines(c.dir() / "runs/two/metrics.jsonl");
  ASSERT_EQ(x.size(), 4u);
  ASSERT_EQ(y.size(), 4u);
  // Step 1 samples from the same weights with the same streams: the same
  // completions and rewards. Later steps train on weights equal to rounding.
  EXPECT_EQ(x[0]["reward_mean"], y[0]["reward_mean"]);
  EXPECT_EQ(x[0]["completion_length_mean"], y[0]["completion_length_mean"]);
  EXPECT_EQ(x[0]["rollout_tokens"], y[0]["rollout_tokens"]);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(x[i]["reward_mean"].get<double>(), y[i]["reward_mean"].get<double>(), 1e-6) << i;
    EXPECT_NEAR(x[i]["loss"].get<double>(), y[i]["loss"].get<double>(), 1e-5) << i;
  }
}

TEST(OnlineGrpoTest, GenerateRefusesWhatItCannotDo) {
  Cluster c("online_grpo_generate_errors");
  WriteFile(c.dir() / "text.jsonl", "{\"prompt\": \"reverse abc\"}\n");
  CommandResult r = RunCommand(
      SbpBinary() + " generate --model model --prompts text.jsonl --max-new-tokens 3", c.dir());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("holds text prompts; give --tokenizer"), std::string::npos) << r.err;
  WriteFile(c.dir() / "bad.jsonl", "{\"prompt_ids\": [1, 99999]}\n");
  r = RunCommand(SbpBinary() + " generate --model model --prompts bad.jsonl --max-new-tokens 3",
                 c.dir());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("bad.jsonl:1"), std::string::npos) << r.err;
  r = RunCommand(
      SbpBinary() + " generate --model model --prompts bad.jsonl --max-new-tokens 3 --top-p 2",
      c.dir());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("top_p"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sbp::testing
