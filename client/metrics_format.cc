#include "client/metrics_format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/table.h"
#include "common/byte_size.h"
#include "nlohmann/json.hpp"

namespace sbp::cli {
namespace {

using Json = nlohmann::json;

constexpr char kRowFormat[] = "%6s %10s %10s %10s %10s %10s %10s  %s";

// A number with `digits` after the point; "nan" for null (JSON has no NaN:
// metrics.jsonl writes null).
std::string Fixed(const Json& j, const char* key, int digits) {
  auto it = j.find(key);
  if (it == j.end()) return "-";
  if (it->is_null()) return "nan";
  if (!it->is_number()) return "-";
  return absl::StrFormat("%.*f", digits, it->get<double>());
}

std::string Scientific(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return "-";
  if (it->is_null()) return "nan";
  if (!it->is_number()) return "-";
  return absl::StrFormat("%.3g", it->get<double>());
}

std::string Text(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string CsvField(const nlohmann::ordered_json& value) {
  std::string text;
  if (value.is_null()) return "";
  text = value.is_string() ? value.get<std::string>() : value.dump();
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

}  // namespace

std::string MetricsTableHeader(bool with_attempt) {
  const std::string row = absl::StrFormat(kRowFormat, "STEP", "LOSS", "LR", "GRAD_NORM", "TOKENS/S",
                                          "PEAK", "EVAL_LOSS", "TIME");
  return with_attempt ? absl::StrFormat("%7s %s\n", "ATTEMPT", row) : row + "\n";
}

std::string MetricsTableRow(const std::string& line, int attempt, bool with_attempt) {
  const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  std::string row;
  if (!j.is_object()) {
    row = TerminalSafe(line);  // not a metrics object: shown as it is
  } else {
    auto peak = j.find("peak_bytes");
    const std::string peak_text =
        peak != j.end() && peak->is_number_integer() ? FormatByteSize(peak->get<int64_t>()) : "-";
    row = absl::StrFormat(kRowFormat, Text(j, "step"), Fixed(j, "loss", 4), Scientific(j, "lr"),
                          Fixed(j, "grad_norm", 4), Fixed(j, "tokens_per_second", 0), peak_text,
                          Fixed(j, "eval_loss", 4), TerminalSafe(Text(j, "time")));
  }
  return with_attempt ? absl::StrFormat("%7d %s\n", attempt, row) : row + "\n";
}

std::string MetricsCsv(const std::vector<std::string>& lines) {
  // Ordered: the columns follow the lines' own key order.
  using Ordered = nlohmann::ordered_json;
  std::vector<Ordered> objects;
  std::vector<std::string> keys;
  for (const std::string& line : lines) {
    Ordered j = Ordered::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;
    for (const auto& [key, value] : j.items()) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
    objects.push_back(std::move(j));
  }
  std::vector<std::string> header;
  for (const std::string& key : keys) header.push_back(CsvField(Ordered(key)));
  std::string out = absl::StrCat(absl::StrJoin(header, ","), "\n");
  for (const Ordered& j : objects) {
    std::vector<std::string> row;
    for (const std::string& key : keys) {
      auto it = j.find(key);
      row.push_back(it == j.end() ? std::string() : CsvField(*it));
    }
    absl::StrAppend(&out, absl::StrJoin(row, ","), "\n");
  }
  return out;
}

}  // namespace sbp::cli
