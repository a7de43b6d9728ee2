// How `sbp metrics` prints metrics lines (JSON objects, as in
// metrics.jsonl): a table for people, CSV with a header of every key.
#pragma once

#include <string>
#include <vector>

namespace sbp::cli {

// Fixed-width columns, so that rows can be printed as they arrive: step,
// loss, lr, grad_norm, tokens/s, peak memory, eval loss, time; first the
// attempt when `with_attempt`. Missing values show "-".
std::string MetricsTableHeader(bool with_attempt);
std::string MetricsTableRow(const std::string& line, int attempt, bool with_attempt);

// A header of the union of the lines' keys (in the order they first
// appear), then one row per line: numbers and booleans as JSON writes them,
// null and missing keys empty, strings as they are, anything else as JSON;
// fields quoted as RFC 4180 wants. A line that is not a JSON object is left
// out.
std::string MetricsCsv(const std::vector<std::string>& lines);

}  // namespace sbp::cli
