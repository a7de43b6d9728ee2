// Greedy decoding against Hugging Face's own `generate`: the tokens that
// transformers' Qwen3ForCausalLM / LlamaForCausalLM choose with their KV
// cache from the committed tiny-qwen3 / tiny-llama models, and the float32
// log-probability of each under the full-sequence forward
// (tests/reference/generate_decode_goldens.py, golden/decode/<preset>.json).
// Every recorded choice leads the runner-up logit by more than 1e-3, so fp32
// rounding cannot flip it: the ids must match exactly.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "nlohmann/json.hpp"
#include "tests/reference/golden_files.h"
#include "worker/engine/decode/decoder.h"
#include "worker/engine/decode/generation.h"
#include "worker/engine/decode/sampler.h"
#include "worker/engine/parameter_store.h"

namespace sbp::testing {
namespace {

constexpr int64_t kMaxNewTokens = 24;
constexpr double kLogprobTolerance = 1e-4;

using golden::GoldenDir;
using golden::ReadJson;

struct DecodeCase {
  std::vector<int32_t> prompt;
  std::vector<int32_t> new_ids;
  std::vector<float> logprobs;
  double min_gap = 0;
};

std::vector<DecodeCase> ParseCases(const nlohmann::json& cases) {
  std::vector<DecodeCase> out;
  for (const auto& c : cases) {
    DecodeCase d;
    d.prompt = c["prompt"].get<std::vector<int32_t>>();
    d.new_ids = c["new_ids"].get<std::vector<int32_t>>();
    d.logprobs = c["logprobs"].get<std::vector<float>>();
    d.min_gap = c["min_gap"].get<double>();
    out.push_back(std::move(d));
  }
  return out;
}

GenerationOptions GreedyOptions(int64_t max_batch = 0) {
  GenerationOptions options;
  options.max_new_tokens = kMaxNewTokens;
  options.sampling.temperature = 0;  // greedy
  options.max_batch = max_batch;     // no EOS, no stop sequences
  return options;
}

std::vector<GenerationRequest> Requests(const std::vector<DecodeCase>& cases) {
  std::vector<GenerationRequest> requests;
  for (const DecodeCase& c : cases) {
    GenerationRequest r;
    r.prompt = c.prompt;
    requests.push_back(std::move(r));
  }
  return requests;
}

void ExpectGolden(const Generation& got, const DecodeCase& want, const std::string& label) {
  const std::string what = label + ", prompt of " + std::to_string(want.prompt.size()) +
                           " tokens (golden min gap " + std::to_string(want.min_gap) + ")";
  EXPECT_EQ(got.finish, FinishReason::kLength) << what << ": " << FinishReasonName(got.finish);
  EXPECT_EQ(got.ids, want.new_ids) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t i = 0; i < want.logprobs.size(); ++i) {
    EXPECT_NEAR(got.logprobs[i], want.logprobs[i], kLogprobTolerance)
        << what << ", new token " << i;
  }
}

class DecodeGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = GoldenDir(GetParam());
    golden_ = ReadJson(GoldenDir("decode/" + GetParam() + ".json"));
    ASSERT_EQ(golden_["preset"].get<std::string>(), GetParam());
    ASSERT_EQ(golden_["max_new_tokens"].get<int64_t>(), kMaxNewTokens);
    cases_ = ParseCases(golden_["cases"]);
    batch_ = ParseCases(golden_["batch"]);
    ASSERT_EQ(cases_.size(), 4u);
    ASSERT_EQ(batch_.size(), 3u);
    for (const auto* group : {&cases_, &batch_}) {
      for (const DecodeCase& c : *group) {
        ASSERT_EQ(c.new_ids.size(), static_cast<size_t>(kMaxNewTokens));
        ASSERT_EQ(c.logprobs.size(), static_cast<size_t>(kMaxNewTokens));
        ASSERT_GT(c.min_gap, 1e-3);
      }
    }
    auto weights = ParameterStore::Load(dir, allocator_, "weights");
    ASSERT_TRUE(weights.ok()) << weights.status();
    weights_ = *std::move(weights);
    config_ = weights_.config();
  }

  nlohmann::json golden_;
  std::vector<DecodeCase> cases_, batch_;
  CpuAllocator allocator_;
  CpuBackend backend_{allocator_};
  ParameterStore weights_;
  ModelConfig config_;
};

// Each prompt alone, with the default prefill chunking and with chunks of 7
// query rows (the 17- and 40-token prompts span several).
TEST_P(DecodeGoldenTest, EachPromptAloneMatchesTransformersGenerate) {
  const ModelTensors w = BindModelTensors(weights_);
  for (int64_t chunk : {0, 7}) {
    Decoder decoder(config_, backend_, chunk);
    for (const DecodeCase& c : cases_) {
      GenerationStats stats;
      auto got = Generate(decoder, w, Requests({c}), GreedyOptions(), &stats);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->size(), 1u);
      ExpectGolden((*got)[0], c, "prefill chunk " + std::to_string(chunk));
      EXPECT_EQ(stats.prompt_tokens, static_cast<int64_t>(c.prompt.size()));
      EXPECT_EQ(stats.new_tokens, kMaxNewTokens);
    }
  }
}

// Three prompts of 3, 11 and 26 tokens in one Generate call: all three
// decoded together, then at most two at a time (and one at a time); each
// gives its own greedy continuation.
TEST_P(DecodeGoldenTest, BatchedPromptsEachMatchTheirOwnContinuation) {
  const ModelTensors w = BindModelTensors(weights_);
  Decoder decoder(config_, backend_);
  for (int64_t max_batch : {0, 2, 1}) {
    const std::string label = "max_batch " + std::to_string(max_batch);
    GenerationStats stats;
    auto got = Generate(decoder, w, Requests(batch_), GreedyOptions(max_batch), &stats);
    ASSERT_TRUE(got.ok()) << label << ": " << got.status();
    ASSERT_EQ(got->size(), batch_.size()) << label;
    int64_t prompt_tokens = 0;
    for (size_t i = 0; i < batch_.size(); ++i) {
      ExpectGolden((*got)[i], batch_[i], label + ", request " + std::to_string(i));
      prompt_tokens += static_cast<int64_t>(batch_[i].prompt.size());
    }
    EXPECT_EQ(stats.prompt_tokens, prompt_tokens) << label;
    EXPECT_EQ(stats.new_tokens, kMaxNewTokens * static_cast<int64_t>(batch_.size())) << label;
  }
  // The four single-prompt cases together too (1 to 40 tokens in one batch).
  auto got = Generate(decoder, w, Requests(cases_), GreedyOptions());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), cases_.size());
  for (size_t i = 0; i < cases_.size(); ++i) {
    ExpectGolden((*got)[i], cases_[i], "all four cases, request " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, DecodeGoldenTest, ::testing::Values("tiny-qwen3", "tiny-llama"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace sbp::testing
