// `sbp metrics` output and the metrics curve `sbp plot ID` reads.
#include "client/metrics_format.h"

#include <gtest/gtest.h>

#include "client/metrics_client.h"

namespace sbp::cli {
namespace {

TEST(MetricsFormatTest, CsvHasTheUnionOfKeysInTheirOrderAndQuotes) {
  const std::string csv = MetricsCsv({
      R"({"step":1,"loss":2.5,"time":"2026-01-01T00:00:00Z"})",
      "not json",
      R"({"step":2,"loss":null,"eval_loss":1.25,"note":"a, \"b\""})",
  });
  EXPECT_EQ(csv,
            "step,loss,time,eval_loss,note\n"
            "1,2.5,2026-01-01T00:00:00Z,,\n"
            "2,,,1.25,\"a, \"\"b\"\"\"\n");
}

TEST(MetricsFormatTest, TableRowsLineUpUnderTheHeader) {
  const std::string header = MetricsTableHeader(true);
  const std::string row = MetricsTableRow(
      R"({"step":12,"loss":2.18413,"lr":0.01,"grad_norm":2.2459,"tokens_per_second":7295.2,)"
      R"("peak_bytes":2138944,"time":"2026-12-05T23:38:38.187Z"})",
      1, true);
  EXPECT_EQ(header.find("STEP") + 4, row.find("12") + 2) << header << row;
  EXPECT_NE(row.find("2.1841"), std::string::npos) << row;
  EXPECT_NE(row.find("7295"), std::string::npos) << row;
  EXPECT_NE(row.find("2.0 MiB"), std::string::npos) << row;
  EXPECT_NE(MetricsTableRow(R"({"step":3,"loss":null})", 1, false).find("nan"), std::string::npos);
}

TEST(MetricsFormatTest, TheCurveIsWhatMetricsJsonlHolds) {
  // Attempt 1 ran to step 4; attempt 2 resumed from the checkpoint of step 2.
  const std::vector<std::string> curve = MetricsCurve({
      {1, R"({"step":1})"},
      {1, R"({"step":2})"},
      {1, R"({"step":3})"},
      {1, R"({"step":4})"},
      {2, R"({"step":3,"a":2})"},
      {1, R"({"step":5})"},  // a straggler of the superseded attempt
      {2, R"({"step":4,"a":2})"},
  });
  EXPECT_EQ(curve, (std::vector<std::string>{R"({"step":1})", R"({"step":2})",
                                             R"({"step":3,"a":2})", R"({"step":4,"a":2})"}));
}

}  // namespace
}  // namespace sbp::cli
