#include "server/job_output.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace sbp::server {

absl::string_view OutputKindName(OutputKind kind) {
  return kind == OutputKind::kMetrics ? "metrics" : "logs";
}

absl::Status CheckOutputCaps(const OutputCaps& caps, OutputKind kind) {
  const absl::string_view flag = kind == OutputKind::kMetrics ? "metrics" : "log";
  if (caps.max_lines < kMinOutputCapLines) {
    return absl::InvalidArgumentError(absl::StrCat("max_", flag, "_lines: must be at least ",
                                                   kMinOutputCapLines, " (got ", caps.max_lines,
                                                   ")"));
  }
  if (caps.max_bytes < kMinOutputCapBytes) {
    return absl::InvalidArgumentError(absl::StrCat("max_", flag, "_bytes: must be at least ",
                                                   kMinOutputCapBytes, " (got ", caps.max_bytes,
                                                   ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MetricsLineStep(absl::string_view line, absl::string_view field) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be one JSON object (a metrics.jsonl line)"));
  }
  auto step = j.find("step");
  if (step == j.end() || !step->is_number_integer()) return 0;
  return step->get<int64_t>();
}

}  // namespace sbp::server
