// metrics.jsonl lines to numeric series, one per field, indexed by step.
// The lines may come from a run directory or from the coordinator; anything
// that is not a JSON object with a numeric "step" is skipped and counted,
// never fatal.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace sbp::plot {

struct Point {
  double step = 0;
  double value = 0;
};

// One field's values, ordered by step (one value per step: the last line wins).
struct Series {
  std::string name;
  std::vector<Point> points;
};

struct ParsedMetrics {
  std::map<std::string, Series> series;  // every field asked for (maybe empty)
  std::set<std::string> numeric_fields;  // fields with a number in some line
  int64_t records = 0;                   // lines that were metrics records
  int64_t malformed = 0;                 // non-blank lines that were not
  int64_t first_malformed_line = 0;      // 1-based; 0 when none
  int64_t non_finite = 0;                // asked-for values that were NaN/inf/null
};

// Reads `fields` out of metrics.jsonl `lines`. Python's NaN/Infinity tokens
// and nlohmann's null (how it writes NaN) count as non-finite values and are
// left out of the series; a value that is not a number is left out silently
// (a field the line does not carry, say).
ParsedMetrics ParseMetricsLines(const std::vector<std::string>& lines,
                                const std::vector<std::string>& fields);

// Splits text into lines (without the '\n'; a trailing '\r' removed).
std::vector<std::string> SplitLines(const std::string& text);

}  // namespace sbp::plot
