// `sbp bench --profile-ops`: after the timed steps of a configuration, one
// more step through the profiling backend prints one line per op (calls,
// seconds, share of that step) and one for the time outside the ops; the
// shares add up to the whole step. Also the FLOP count the MFU uses: its
// attention term is reported and grows as T^2.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/cli_test_util.h"

namespace sbp::testing {
namespace {

std::vector<nlohmann::json> JsonLines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

TEST(BenchProfileCliTest, ProfileOpsPrintsEachOpsTimeAndShare) {
  const auto dir = FreshDir("bench_profile_cli");
  const CommandResult r =
      RunCommand(absl::StrCat("'", SbpBinary(),
                              "' bench --preset tiny-qwen3 --seq-len 64 --seq-len 32 --mode stream "
                              "--mode full --chunk-tokens 16 --profile-ops --profile-mode stream "
                              "--profile-seq-len 64"),
                 dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<nlohmann::json> steps, ops;
  for (const nlohmann::json& line : JsonLines(r.out)) {
    (line.contains("profile_op") ? ops : steps).push_back(line);
  }
  ASSERT_EQ(steps.size(), 4u) << r.out;  // 2 lengths x 2 modes, unchanged by profiling
  ASSERT_GE(ops.size(), 3u) << r.out;
  std::set<std::string> names;
  double shares = 0, seconds = 0;
  for (const nlohmann::json& op : ops) {
    // Only the configuration asked for.
    EXPECT_EQ(op["mode"], "stream") << op.dump();
    EXPECT_EQ(op["seq_len"], 64) << op.dump();
    EXPECT_EQ(op["model"], "tiny-qwen3") << op.dump();
    ASSERT_TRUE(op["profile_op"].is_string()) << op.dump();
    names.insert(op["profile_op"].get<std::string>());
    EXPECT_GE(op["seconds"].get<double>(), 0.0) << op.dump();
    EXPECT_GE(op["share_of_step"].get<double>(), 0.0) << op.dump();
    EXPECT_LE(op["share_of_step"].get<double>(), 1.0) << op.dump();
    if (op["profile_op"] != "(unattributed)") {
      EXPECT_GT(op["calls"].get<int64_t>(), 0) << op.dump();
    }
    EXPECT_EQ(op["profiled_step_seconds"], ops[0]["profiled_step_seconds"]);
    shares += op["share_of_step"].get<double>();
    seconds += op["seconds"].get<double>();
  }
  for (const char* name : {"attention_forward", "attention_backward", "matmul_xwt", "matmul_dyw",
                           "matmul_accum_dytx", "rms_norm_forward", "swiglu_backward",
                           "cross_entropy_forward_backward", "embedding_forward"}) {
    EXPECT_TRUE(names.count(name)) << name << " missing from\n" << r.out;
  }
  EXPECT_EQ(ops.back()["profile_op"], "(unattributed)");
  EXPECT_EQ(ops.back()["calls"], 0);
  EXPECT_NEAR(shares, 1.0, 1e-6);
  EXPECT_NEAR(seconds, ops[0]["profiled_step_seconds"].get<double>(), 1e-6);

  // The MFU's FLOPs carry the causal attention term, ~T^2.
  const nlohmann::json* s64 = nullptr;
  const nlohmann::json* s32 = nullptr;
  for (const nlohmann::json& s : steps) {
    if (s["mode"] == "stream") (s["seq_len"] == 64 ? s64 : s32) = &s;
  }
  ASSERT_TRUE(s64 != nullptr && s32 != nullptr) << r.out;
  const double a64 = (*s64)["attention_flops"].get<double>();
  const double a32 = (*s32)["attention_flops"].get<double>();
  EXPECT_GT(a32, 0.0);
  EXPECT_NEAR(a64, 4 * a32, 1e-6 * a64);
  EXPECT_NEAR((*s64)["model_flops"].get<double>() - 2 * (*s32)["model_flops"].get<double>(),
              2 * a32, 1e-6 * a64);
}

TEST(BenchProfileCliTest, WithoutProfileOpsNoOpLinesAndItsFiltersNeedIt) {
  const auto dir = FreshDir("bench_profile_cli_off");
  const CommandResult plain = RunCommand(
      absl::StrCat("'", SbpBinary(), "' bench --preset tiny-qwen3 --seq-len 32 --mode stream"),
      dir);
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  for (const nlohmann::json& line : JsonLines(plain.out)) {
    EXPECT_FALSE(line.contains("profile_op")) << line.dump();
  }
  const CommandResult orphan =
      RunCommand(absl::StrCat("'", SbpBinary(),
                              "' bench --preset tiny-qwen3 --seq-len 32 --profile-mode stream"),
                 dir);
  EXPECT_EQ(orphan.exit_code, 2) << orphan.out << orphan.err;
  EXPECT_NE(orphan.err.find("--profile-ops"), std::string::npos) << orphan.err;
}

}  // namespace
}  // namespace sbp::testing
