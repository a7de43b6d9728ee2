// Packing through the CLI: `sbp bench --packed-docs K` and `--separate-docs K`
// run the same tokens packed into one sequence and as K sequences, with the
// same loss; `sbp plan --packed-docs` reports them.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/cli_test_util.h"

namespace sbp::testing {
namespace {

nlohmann::json LastJsonLine(const std::string& out) {
  std::istringstream lines(out);
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '{') last = line;
  }
  return nlohmann::json::parse(last);
}

TEST(PackingCliTest, BenchPackedAndSeparateDocumentsGiveTheSameLoss) {
  const auto dir = FreshDir("packing_cli");
  const std::string bench =
      absl::StrCat("'", SbpBinary(),
                   "' bench --preset tiny-qwen3 --seq-len 96 --mode stream --chunk-tokens 16 ");
  const CommandResult packed = RunCommand(bench + "--packed-docs 6", dir);
  ASSERT_EQ(packed.exit_code, 0) << packed.out << packed.err;
  const CommandResult separate = RunCommand(bench + "--separate-docs 6", dir);
  ASSERT_EQ(separate.exit_code, 0) << separate.out << separate.err;
  const nlohmann::json p = LastJsonLine(packed.out), s = LastJsonLine(separate.out);
  EXPECT_EQ(p["layout"], "packed");
  EXPECT_EQ(s["layout"], "separate");
  EXPECT_EQ(p["documents"], 6);
  EXPECT_NEAR(p["loss"].get<double>(), s["loss"].get<double>(), 1e-5 * s["loss"].get<double>());
  const CommandResult both = RunCommand(bench + "--packed-docs 6 --separate-docs 6", dir);
  EXPECT_EQ(both.exit_code, 2) << both.out << both.err;
  // More documents than tokens: a usage error, not an abort.
  const CommandResult too_many = RunCommand(
      absl::StrCat("'", SbpBinary(), "' bench --preset tiny-qwen3 --seq-len 4 --packed-docs 10"),
      dir);
  EXPECT_EQ(too_many.exit_code, 2) << too_many.out << too_many.err;
  EXPECT_NE(too_many.err.find("--seq-len 4 cannot be cut into 10 documents"), std::string::npos)
      << too_many.err;
}

TEST(PackingCliTest, PlanCountsPackedDocuments) {
  const auto dir = FreshDir("packing_plan_cli");
  const CommandResult r = RunCommand(
      absl::StrCat("'", SbpBinary(),
                   "' plan --preset qwen3-8b --seq-len 32768 --precision bf16 --packed-docs 64 "
                   "-o json"),
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json plan = nlohmann::json::parse(r.out);
  EXPECT_EQ(plan["packed_documents"], 64);
  EXPECT_EQ(plan["breakdown"]["document_offsets"], 65 * 4);
}

}  // namespace
}  // namespace sbp::testing
