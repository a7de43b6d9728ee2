// metrics.jsonl lines to series: good lines, and every kind of bad one
// skipped and counted.
#include "client/plot/series.h"

#include <gtest/gtest.h>

#include "client/plot/chart.h"

namespace sbp::plot {
namespace {

std::vector<double> Values(const Series& s) {
  std::vector<double> v;
  for (const Point& p : s.points) v.push_back(p.value);
  return v;
}

std::vector<double> Steps(const Series& s) {
  std::vector<double> v;
  for (const Point& p : s.points) v.push_back(p.step);
  return v;
}

TEST(SeriesTest, ReadsFieldsByStep) {
  const ParsedMetrics m =
      ParseMetricsLines({R"({"step":1,"loss":5.5,"lr":0.001,"time":"2026-01-01T00:00:00Z"})",
                         R"({"step":2,"loss":4.25,"lr":0.002,"eval_loss":4.5})", "",
                         R"({"step":3,"loss":3,"lr":0.003})"},
                        {"loss", "eval_loss", "lr"});
  EXPECT_EQ(m.records, 3);
  EXPECT_EQ(m.malformed, 0);
  EXPECT_EQ(m.non_finite, 0);
  EXPECT_EQ(Values(m.series.at("loss")), (std::vector<double>{5.5, 4.25, 3}));
  EXPECT_EQ(Steps(m.series.at("loss")), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(Values(m.series.at("eval_loss")), (std::vector<double>{4.5}));
  EXPECT_EQ(Steps(m.series.at("eval_loss")), (std::vector<double>{2}));
  EXPECT_EQ(m.series.at("lr").points.size(), 3u);
  EXPECT_EQ(m.numeric_fields, (std::set<std::string>{"eval_loss", "loss", "lr"}));
}

TEST(SeriesTest, SkipsAndCountsMalformedLines) {
  const ParsedMetrics m = ParseMetricsLines(
      {R"({"step":1,"loss":2})", "not json at all", R"([1,2,3])", R"({"loss":1.5})",
       R"({"step":"4","loss":1})", R"({"step":null,"loss":1})", R"({"step":5,"loss":)",
       "\"a string\"", "42", R"({"step":6,"loss":1.25})", "   \t"},
      {"loss"});
  EXPECT_EQ(m.records, 2);
  EXPECT_EQ(m.malformed, 8);
  EXPECT_EQ(m.first_malformed_line, 2);
  EXPECT_EQ(Values(m.series.at("loss")), (std::vector<double>{2, 1.25}));
}

TEST(SeriesTest, NonFiniteValuesAreLeftOutAndCounted) {
  // Python's json writes NaN and Infinity; nlohmann writes NaN as null. A
  // literal too large for a double makes the line malformed (nlohmann
  // refuses it), which is skipped like any other.
  const ParsedMetrics m = ParseMetricsLines(
      {R"({"step":1,"loss":NaN,"note":"NaN stays a string"})", R"({"step":2,"loss":Infinity})",
       R"({"step":3,"loss":-Infinity})", R"({"step":4,"loss":null})", R"({"step":5,"loss":1e400})",
       R"({"step":6,"loss":0.5,"note":"Infinity"})"},
      {"loss"});
  EXPECT_EQ(m.records, 5);
  EXPECT_EQ(m.malformed, 1);
  EXPECT_EQ(m.first_malformed_line, 5);
  EXPECT_EQ(m.non_finite, 4);
  EXPECT_EQ(Values(m.series.at("loss")), (std::vector<double>{0.5}));
}

TEST(SeriesTest, MissingAndNonNumericFieldsAreNoPoints) {
  const ParsedMetrics m =
      ParseMetricsLines({R"({"step":1,"loss":1,"reward_mean":"high"})",
                         R"({"step":2,"reward_mean":0.5})", R"({"step":3,"reward_mean":[1]})"},
                        {"loss", "reward_mean", "grad_norm"});
  EXPECT_EQ(m.records, 3);
  EXPECT_EQ(m.non_finite, 0);
  EXPECT_EQ(m.series.at("loss").points.size(), 1u);
  EXPECT_EQ(Values(m.series.at("reward_mean")), (std::vector<double>{0.5}));
  EXPECT_TRUE(m.series.at("grad_norm").points.empty());
}

TEST(SeriesTest, SortsByStepAndTheLastLineOfAStepWins) {
  const ParsedMetrics m = ParseMetricsLines({R"({"step":3,"loss":3})", R"({"step":1,"loss":1})",
                                             R"({"step":2,"loss":2})", R"({"step":2,"loss":20})"},
                                            {"loss"});
  EXPECT_EQ(Steps(m.series.at("loss")), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(Values(m.series.at("loss")), (std::vector<double>{1, 20, 3}));
}

TEST(SeriesTest, SplitLinesHandlesCrlfAndAMissingLastNewline) {
  EXPECT_EQ(SplitLines("a\r\nb\n\nc"), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_TRUE(SplitLines("").empty());
}

TEST(ChartTest, PairsEachMetricWithItsEvalValues) {
  const ParsedMetrics m = ParseMetricsLines(
      {R"({"step":1,"loss":2,"grad_norm":1})", R"({"step":2,"loss":1,"eval_loss":1.5})"},
      FieldsFor({"loss", "grad_norm"}));
  absl::StatusOr<Chart> chart =
      BuildChart("run-a", "run/metrics.jsonl", {"loss", "grad_norm"}, m, /*log_y=*/false);
  ASSERT_TRUE(chart.ok()) << chart.status();
  ASSERT_EQ(chart->panels.size(), 2u);
  EXPECT_EQ(chart->panels[0].main.name, "loss");
  EXPECT_EQ(chart->panels[0].eval.points.size(), 1u);
  EXPECT_EQ(chart->panels[1].main.name, "grad_norm");
  EXPECT_TRUE(chart->panels[1].eval.points.empty());
}

TEST(ChartTest, AMetricWithoutValuesNamesTheOriginAndTheFieldsThere) {
  const ParsedMetrics m =
      ParseMetricsLines({R"({"step":1,"loss":2,"lr":0.1})"}, FieldsFor({"reward_mean"}));
  absl::StatusOr<Chart> chart = BuildChart("r", "runs/x/metrics.jsonl", {"reward_mean"}, m, false);
  ASSERT_FALSE(chart.ok());
  EXPECT_EQ(chart.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(chart.status().message().find("runs/x/metrics.jsonl"), std::string::npos);
  EXPECT_NE(chart.status().message().find("'reward_mean'"), std::string::npos);
  EXPECT_NE(chart.status().message().find("loss, lr"), std::string::npos);
}

TEST(ChartTest, LogScaleLeavesOutValuesAtOrBelowZero) {
  const ParsedMetrics m = ParseMetricsLines(
      {R"({"step":1,"loss":0})", R"({"step":2,"loss":-1})", R"({"step":3,"loss":0.5})"},
      FieldsFor({"loss"}));
  absl::StatusOr<Chart> chart = BuildChart("r", "o", {"loss"}, m, /*log_y=*/true);
  ASSERT_TRUE(chart.ok()) << chart.status();
  EXPECT_EQ(chart->dropped_non_positive, 2);
  EXPECT_EQ(chart->panels[0].main.points.size(), 1u);
  const Range r = ValueRange(chart->panels[0], true);
  EXPECT_GT(r.lo, 0);
  EXPECT_LT(r.lo, r.hi);
}

}  // namespace
}  // namespace sbp::plot
