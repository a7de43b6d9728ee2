// `sbp train` as a user runs it: it learns on the example task, and every kind
// of bad input ends with a message naming what is wrong and exit code 2,
// without touching the run directory's checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>

#include "nlohmann/json.hpp"
#include "tests/e2e/cli_test_util.h"

namespace sbp::testing {
namespace {

namespace fs = std::filesystem;

class TrainCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir(std::string("train_cli_") +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    const CommandResult init =
        RunCommand(SbpBinary() + " model init --preset tiny-llama --seed 4 --out model", dir_);
    ASSERT_EQ(init.exit_code, 0) << init.err;
    WriteFile(dir_ / "data.jsonl",
              "{\"prompt_ids\": [1, 17, 18, 19, 2], \"completion_ids\": [19, 18, 17, 3]}\n"
              "{\"input_ids\": [1, 20, 21, 2, 21, 20, 3]}\n");
  }

  std::string Spec(const std::string& extra_train = "", const std::string& data = "data.jsonl") {
    return "name: cli-job\nmodel: model\ndata: " + data +
           "\nobjective: sft\nseq_len: 32\n"
           "streambp: {mode: stream, chunk_tokens: 3, logits_chunk_tokens: 2}\n"
           "train: {steps: 4, sequences_per_step: 2, lr: 1.0e-2" +
           extra_train +
           "}\n"
           "checkpoint: {every_steps: 2, dir: run}\n";
  }

  CommandResult Train(const std::string& spec_text, const std::string& flags = "") {
    WriteFile(dir_ / "job.yaml", spec_text);
    return RunCommand(SbpBinary() + " train job.yaml" + flags, dir_);
  }

  fs::path dir_;
};

TEST_F(TrainCliTest, RunsAndWritesMetricsAndCheckpoints) {
  const CommandResult r = Train(Spec());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"last_step\":4"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("4/4"), std::string::npos) << r.err;  // the progress line
  EXPECT_TRUE(fs::exists(dir_ / "run/checkpoints/step-00000004/model.safetensors"));
  // Resume state lives apart from the model files; `latest` links the step.
  EXPECT_TRUE(
      fs::exists(dir_ / "run/checkpoints/step-00000004/trainer_state/optimizer.safetensors"));
  EXPECT_FALSE(fs::exists(dir_ / "run/checkpoints/step-00000004/optimizer.safetensors"));
  EXPECT_TRUE(fs::is_symlink(dir_ / "run/checkpoints/latest"));
  EXPECT_EQ(fs::read_symlink(dir_ / "run/checkpoints/latest"), "step-00000004");
  const std::string metrics = ReadAll((dir_ / "run/metrics.jsonl").string());
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 4);
}

// `eval:` writes the validation loss of the step's weights on the due
// steps, and it is the loss `sbp grad` computes for those weights and data.
TEST_F(TrainCliTest, ValidationLossEqualsGradLossOfTheSameWeights) {
  WriteFile(dir_ / "eval.jsonl",
            "{\"input_ids\": [1, 21, 20, 19, 2, 19, 20, 21, 3]}\n"
            "{\"prompt_ids\": [1, 18, 17, 2], \"completion_ids\": [17, 18, 3]}\n"
            "{\"input_ids\": [1, 22, 23, 24, 25, 2]}\n");
  std::string spec = Spec();
  spec += "eval: {data: eval.jsonl, every_steps: 2, max_examples: 2}\n";
  const CommandResult r = Train(spec);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("eval "), std::string::npos) << r.err;  // the progress line

  std::map<int64_t, double> eval_loss;
  std::istringstream metrics(ReadAll((dir_ / "run/metrics.jsonl").string()));
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("eval_loss")) eval_loss[j["step"].get<int64_t>()] = j["eval_loss"];
  }
  ASSERT_EQ(eval_loss.size(), 2u);
  ASSERT_TRUE(eval_loss.contains(2) && eval_loss.contains(4));
  EXPECT_NE(eval_loss[2], eval_loss[4]);

  // The same two examples through `sbp grad` on the step-4 weights.
  WriteFile(dir_ / "eval2.jsonl",
            "{\"input_ids\": [1, 21, 20, 19, 2, 19, 20, 21, 3]}\n"
            "{\"prompt_ids\": [1, 18, 17, 2], \"completion_ids\": [17, 18, 3]}\n");
  const CommandResult grad = RunCommand(
      SbpBinary() + " grad --model run/checkpoints/step-00000004 --data eval2.jsonl --out g.st",
      dir_);
  ASSERT_EQ(grad.exit_code, 0) << grad.err;
  const double grad_loss = nlohmann::json::parse(grad.out)["loss"];
  EXPECT_NEAR(eval_loss[4], grad_loss, 1e-6 * std::max(1.0, std::abs(grad_loss)));
}

TEST_F(TrainCliTest, ABadValidationFileIsNamedBeforeTheFirstStep) {
  WriteFile(dir_ / "eval.jsonl", "{\"input_ids\": [1, 2]}\n{\"input_ids\": \"nope\"}\n");
  const CommandResult r = Train(Spec() + "eval: {data: eval.jsonl}\n");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("eval.data"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(":2"), std::string::npos) << r.err;  // the line
  EXPECT_FALSE(fs::exists(dir_ / "run/checkpoints/latest"));
}

struct BadCase {
  std::string name;
  std::string spec;           // job.yaml text
  std::string data;           // data.jsonl replacement ("" keeps the good data)
  std::string expected_text;  // must appear in stderr
};

TEST_F(TrainCliTest, BadInputIsExitCodeTwoWithAClearMessage) {
  // A good run first: its checkpoints must survive every failed attempt.
  ASSERT_EQ(Train(Spec()).exit_code, 0);
  const std::string weights =
      ReadAll((dir_ / "run/checkpoints/step-00000004/model.safetensors").string());
  const std::vector<BadCase> cases = {
      {"unknown key", Spec() + "trian: {}\n", "", "unknown key 'trian'"},
      {"wrong type", Spec(", warmup_steps: ten"), "", "train.warmup_steps"},
      {"out of range", Spec(", max_grad_norm: -1"), "", "train.max_grad_norm"},
      {"yaml syntax", "name: [unclosed\n", "", "job.yaml"},
      {"missing data file", Spec("", "nope.jsonl"), "", "nope.jsonl"},
      {"vocab overflow", Spec(), "{\"input_ids\": [1, 2, 999]}\n", "data.jsonl:1"},
      {"bad data line", Spec(), "{\"input_ids\": [1, 2]}\n{\"input_ids\": \"x\"}\n",
       "data.jsonl:2"},
      {"empty dataset", Spec(), "\n", "data.jsonl"},
  };
  const std::string good_data = ReadAll((dir_ / "data.jsonl").string());
  for (const BadCase& c : cases) {
    WriteFile(dir_ / "data.jsonl", c.data.empty() ? good_data : c.data);
    // --resume: past the check that the run exists, to where the run reads its data.
    const CommandResult r = Train(c.spec, " --resume");
    EXPECT_EQ(r.exit_code, 2) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(c.expected_text), std::string::npos)
        << c.name << ": expected '" << c.expected_text << "' in: " << r.err;
    EXPECT_EQ(ReadAll((dir_ / "run/checkpoints/step-00000004/model.safetensors").string()), weights)
        << c.name;
  }
}

// The reference runs through an engine made for the policy's config: one of
// another architecture or shape is refused by name before any step (it used
// to reach a kernel's shape check and abort the process).
TEST_F(TrainCliTest, AReferenceModelOfAnotherShapeIsExitCodeTwo) {
  const CommandResult init =
      RunCommand(SbpBinary() + " model init --preset tiny-qwen3 --seed 4 --out ref", dir_);
  ASSERT_EQ(init.exit_code, 0) << init.err;
  WriteFile(dir_ / "pairs.jsonl",
            "{\"prompt_ids\": [1, 17, 18], \"chosen_ids\": [19, 3], \"rejected_ids\": [20, 3]}\n"
            "{\"prompt_ids\": [1, 21, 22], \"chosen_ids\": [23, 3], \"rejected_ids\": [24, 3]}\n");
  const CommandResult r = Train(
      "name: dpo-job\nmodel: model\ndata: pairs.jsonl\nobjective: dpo\nseq_len: 32\n"
      "train: {steps: 1, sequences_per_step: 2, lr: 1.0e-2}\n"
      "dpo: {beta: 0.1, reference: ref}\n");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("model_type qwen3 (the policy has llama)"), std::string::npos) << r.err;
}

TEST_F(TrainCliTest, UsageErrorsAreExitCodeTwo) {
  EXPECT_EQ(RunCommand(SbpBinary() + " train", dir_).exit_code, 2);
  EXPECT_EQ(RunCommand(SbpBinary() + " --no-such-flag", dir_).exit_code, 2);
  EXPECT_EQ(
      RunCommand(SbpBinary() + " grad --model model --data data.jsonl --mode fast --out g", dir_)
          .exit_code,
      2);
  const CommandResult missing = RunCommand(SbpBinary() + " train missing.yaml", dir_);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("missing.yaml"), std::string::npos) << missing.err;
}

TEST_F(TrainCliTest, CorruptModelFileIsReported) {
  WriteFile(dir_ / "model/model.safetensors", "\x08\x00\x00\x00\x00\x00\x00\x00{not json");
  const CommandResult r =
      RunCommand(SbpBinary() + " grad --model model --data data.jsonl --out g.safetensors", dir_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("model.safetensors"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sbp::testing
