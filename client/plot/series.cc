#include "client/plot/series.h"

#include <algorithm>
#include <cmath>

#include "nlohmann/json.hpp"

namespace sbp::plot {
namespace {

bool IsBlank(const std::string& line) {
  return std::all_of(line.begin(), line.end(),
                     [](unsigned char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// Replaces the bare tokens NaN, Infinity and -Infinity (outside strings) by
// null, so that lines Python's json module wrote still parse.
std::string NonFiniteTokensToNull(const std::string& line) {
  std::string out;
  out.reserve(line.size());
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\' && i + 1 < line.size()) {
        out.push_back(line[++i]);
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* token : {"-Infinity", "Infinity", "NaN"}) {
      const size_t n = std::char_traits<char>::length(token);
      if (line.compare(i, n, token) == 0) {
        out += "null";
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out.push_back(c);
  }
  return out;
}

nlohmann::json ParseLine(const std::string& line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() &&
      (line.find("NaN") != std::string::npos || line.find("Infinity") != std::string::npos)) {
    j = nlohmann::json::parse(NonFiniteTokensToNull(line), nullptr, false);
  }
  return j;
}

// Sorts by step and keeps the last value written for each step (a resumed
// run's lines, or the same line served twice).
void SortAndDeduplicate(std::vector<Point>* points) {
  std::stable_sort(points->begin(), points->end(),
                   [](const Point& a, const Point& b) { return a.step < b.step; });
  std::vector<Point> kept;
  kept.reserve(points->size());
  for (const Point& p : *points) {
    if (!kept.empty() && kept.back().step == p.step) {
      kept.back() = p;
    } else {
      kept.push_back(p);
    }
  }
  *points = std::move(kept);
}

}  // namespace

ParsedMetrics ParseMetricsLines(const std::vector<std::string>& lines,
                                const std::vector<std::string>& fields) {
  ParsedMetrics parsed;
  for (const std::string& field : fields) parsed.series[field].name = field;
  for (size_t n = 0; n < lines.size(); ++n) {
    if (IsBlank(lines[n])) continue;
    const nlohmann::json j = ParseLine(lines[n]);
    const auto step = j.is_object() ? j.find("step") : j.end();
    if (!j.is_object() || step == j.end() || !step->is_number() ||
        !std::isfinite(step->get<double>())) {
      if (parsed.malformed++ == 0) parsed.first_malformed_line = static_cast<int64_t>(n) + 1;
      continue;
    }
    ++parsed.records;
    const double x = step->get<double>();
    for (const auto& [key, value] : j.items()) {
      if (value.is_number() && key != "step") parsed.numeric_fields.insert(key);
    }
    for (auto& [field, series] : parsed.series) {
      const auto it = j.find(field);
      if (it == j.end()) continue;
      if (it->is_null()) {
        ++parsed.non_finite;
      } else if (it->is_number()) {
        const double y = it->get<double>();
        if (std::isfinite(y)) {
          series.points.push_back({x, y});
        } else {
          ++parsed.non_finite;
        }
      }
    }
  }
  for (auto& [field, series] : parsed.series) SortAndDeduplicate(&series.points);
  return parsed;
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

}  // namespace sbp::plot
