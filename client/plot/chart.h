// What a plot shows, independent of how it is drawn: one panel per metric,
// each with its series and, when the run has them, the eval_<metric> values
// beside it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/plot/series.h"

namespace sbp::plot {

struct Panel {
  Series main;  // the metric, one value per logged step
  Series eval;  // eval_<metric> (eval_loss beside loss); empty when none
};

struct Chart {
  std::string title;  // the run's name
  std::vector<Panel> panels;
  bool log_y = false;
  int64_t dropped_non_positive = 0;  // values a log scale cannot show
};

// The fields ParseMetricsLines should read for `metrics`: each metric and
// its eval_ companion.
std::vector<std::string> FieldsFor(const std::vector<std::string>& metrics);

// One panel per metric out of `parsed`. NotFound naming `origin` and the
// numeric fields there when a metric has no values at all.
absl::StatusOr<Chart> BuildChart(const std::string& title, const std::string& origin,
                                 const std::vector<std::string>& metrics,
                                 const ParsedMetrics& parsed, bool log_y);

// The value range [lo, hi] of a panel's points (main and eval), widened when
// every value is the same so that the range is never empty.
struct Range {
  double lo = 0;
  double hi = 1;
};
Range ValueRange(const Panel& panel, bool log_y);
Range StepRange(const Panel& panel);

}  // namespace sbp::plot
