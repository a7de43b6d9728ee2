#include "client/plot/chart.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sbp::plot {
namespace {

// The eval_ companion of a metric, or "" for a metric that is one already.
std::string EvalFieldOf(const std::string& metric) {
  return absl::StartsWith(metric, "eval_") ? "" : "eval_" + metric;
}

Series Copy(const ParsedMetrics& parsed, const std::string& field) {
  const auto it = parsed.series.find(field);
  if (it == parsed.series.end()) return Series{field, {}};
  return it->second;
}

int64_t DropNonPositive(Series* s) {
  const size_t before = s->points.size();
  s->points.erase(std::remove_if(s->points.begin(), s->points.end(),
                                 [](const Point& p) { return !(p.value > 0); }),
                  s->points.end());
  return static_cast<int64_t>(before - s->points.size());
}

template <typename Get>
Range Extent(const Panel& panel, Get get) {
  Range r{INFINITY, -INFINITY};
  for (const Series* s : {&panel.main, &panel.eval}) {
    for (const Point& p : s->points) {
      r.lo = std::min(r.lo, get(p));
      r.hi = std::max(r.hi, get(p));
    }
  }
  if (!(r.lo <= r.hi)) return Range{0, 1};
  return r;
}

}  // namespace

std::vector<std::string> FieldsFor(const std::vector<std::string>& metrics) {
  std::vector<std::string> fields;
  for (const std::string& m : metrics) {
    fields.push_back(m);
    if (const std::string eval = EvalFieldOf(m); !eval.empty()) fields.push_back(eval);
  }
  return fields;
}

absl::StatusOr<Chart> BuildChart(const std::string& title, const std::string& origin,
                                 const std::vector<std::string>& metrics,
                                 const ParsedMetrics& parsed, bool log_y) {
  if (metrics.empty()) return absl::InvalidArgumentError("no metric to plot");
  Chart chart;
  chart.title = title;
  chart.log_y = log_y;
  for (const std::string& metric : metrics) {
    Panel panel;
    panel.main = Copy(parsed, metric);
    const std::string eval = EvalFieldOf(metric);
    if (!eval.empty()) panel.eval = Copy(parsed, eval);
    if (panel.main.points.empty()) {
      return absl::NotFoundError(absl::StrCat(
          origin, ": no finite '", metric, "' values in ", parsed.records,
          " metrics lines (numeric fields there: ",
          parsed.numeric_fields.empty() ? "none" : absl::StrJoin(parsed.numeric_fields, ", "),
          ")"));
    }
    if (log_y) {
      chart.dropped_non_positive += DropNonPositive(&panel.main) + DropNonPositive(&panel.eval);
      if (panel.main.points.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(origin, ": --log-y: no positive '", metric,
                                                       "' values to plot on a log scale"));
      }
    }
    chart.panels.push_back(std::move(panel));
  }
  return chart;
}

Range ValueRange(const Panel& panel, bool log_y) {
  Range r = Extent(panel, [](const Point& p) { return p.value; });
  if (r.lo == r.hi) {
    if (log_y) return Range{r.lo / 2, r.hi * 2};
    const double pad = r.lo == 0 ? 1 : std::abs(r.lo) * 0.1;
    return Range{r.lo - pad, r.hi + pad};
  }
  return r;
}

Range StepRange(const Panel& panel) {
  Range r = Extent(panel, [](const Point& p) { return p.step; });
  if (r.lo == r.hi) return Range{r.lo - 1, r.hi + 1};
  return r;
}

}  // namespace sbp::plot
