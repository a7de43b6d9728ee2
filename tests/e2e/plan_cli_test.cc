// `sbp plan` as a user runs it: the breakdown of one configuration and the
// longest sequence per mode, as text and as JSON, and its errors.
#include <gtest/gtest.h>

#include <string>

#include "nlohmann/json.hpp"
#include "tests/e2e/cli_test_util.h"

namespace sbp::testing {
namespace {

CommandResult Plan(const std::string& args) {
  return RunCommand(SbpBinary() + " plan " + args, FreshDir("sbp_plan"));
}

nlohmann::json ParseJson(const CommandResult& r) {
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j;
}

TEST(PlanCli, OneConfigurationAsJsonHasThePeakAndItsBreakdown) {
  const CommandResult r = Plan(
      "--preset bench-qwen3 --seq-len 4096 --mode stream --chunk-tokens 256 "
      "--logits-chunk-tokens 128 -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = ParseJson(r);
  ASSERT_TRUE(j.contains("peak_bytes"));
  ASSERT_TRUE(j["breakdown"].is_object());
  int64_t sum = 0;
  for (const auto& [name, bytes] : j["breakdown"].items()) sum += bytes.get<int64_t>();
  EXPECT_EQ(sum, j["peak_bytes"].get<int64_t>());
  for (const char* term : {"weights", "gradients", "optimizer_moments", "layer_inputs",
                           "kv_buffers", "chunk_activations", "hidden_gradient", "logits"}) {
    EXPECT_GT(j["breakdown"].value(term, int64_t{0}), 0) << term;
  }
  EXPECT_EQ(j["chunk_tokens"], 256);
  EXPECT_EQ(j["logits_chunk_tokens"], 128);
  EXPECT_EQ(j["breakdown"]["logits"], int64_t{128} * 151936 * 4);

  // --bp-only drops the optimizer moments.
  const nlohmann::json bp = ParseJson(
      Plan("--preset bench-qwen3 --seq-len 4096 --chunk-tokens 256 --logits-chunk-tokens 128 "
           "--bp-only -o json"));
  EXPECT_FALSE(bp["breakdown"].contains("optimizer_moments"));
  EXPECT_EQ(j["peak_bytes"].get<int64_t>() - bp["peak_bytes"].get<int64_t>(),
            j["breakdown"]["optimizer_moments"].get<int64_t>());
}

TEST(PlanCli, MaxSeqLenAsJsonOrdersTheModes) {
  const CommandResult r =
      Plan("--preset qwen3-8b --max-seq-len --memory 80GiB --precision bf16 --bp-only -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = ParseJson(r);
  ASSERT_EQ(j.size(), 3u) << r.out;
  const int64_t full = j["full"], checkpoint = j["checkpoint"], stream = j["stream"];
  EXPECT_GT(full, 1000);
  EXPECT_GT(checkpoint, 2 * full);
  EXPECT_GT(stream, 2 * checkpoint);
}

TEST(PlanCli, MemoryChoosesAutoChunksAndReportsAMiss) {
  const nlohmann::json fits =
      ParseJson(Plan("--preset bench-qwen3 --seq-len 8192 --memory 4GiB -o json"));
  EXPECT_EQ(fits["fits"], true);
  EXPECT_LE(fits["peak_bytes"].get<int64_t>(), fits["usable_bytes"].get<int64_t>());
  EXPECT_GE(fits["chunk_tokens"].get<int64_t>(), 64);

  const CommandResult miss = Plan("--preset bench-qwen3 --seq-len 8192 --memory 1GiB -o json");
  EXPECT_EQ(miss.exit_code, 1);
  EXPECT_EQ(ParseJson(miss)["fits"], false);
  EXPECT_NE(miss.err.find("does not fit: stream mode at seq_len 8192 needs"), std::string::npos)
      << miss.err;
}

TEST(PlanCli, TextOutputNamesTheTerms) {
  const CommandResult r =
      Plan("--preset qwen3-8b --seq-len 8192 --mode checkpoint --precision bf16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"qwen3-8b, checkpoint mode, seq_len 8192", "peak ", "master_weights",
                           "logits_gradient", "cuda_context"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
}

TEST(PlanCli, BadInputIsExitCodeTwoWithTheFlag) {
  CommandResult r = Plan("--preset qwen3-8b --max-seq-len");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--max-seq-len needs --memory"), std::string::npos) << r.err;
  r = Plan("--preset qwen3-8b --seq-len 100 --chunk-tokens lots");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--chunk-tokens"), std::string::npos) << r.err;
  r = Plan("--preset nope --seq-len 100");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown model preset 'nope'"), std::string::npos) << r.err;
  r = Plan("--preset qwen3-8b --seq-len 100 --precision bf16 --device cpu");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("precision"), std::string::npos) << r.err;
  r = Plan("--seq-len 100");
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace sbp::testing
