#include "client/plot/run_metrics.h"

#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/plot/series.h"
#include "worker/model/file_util.h"
#include "worker/train/run_directory.h"

namespace sbp::plot {
namespace {

namespace fs = std::filesystem;

// metrics.jsonl grows by a few hundred bytes a step; this is millions of steps.
constexpr int64_t kMaxMetricsBytes = int64_t{2} << 30;

std::string RunName(const fs::path& run_dir) {
  absl::StatusOr<RunRecord> record = ReadRunRecord(run_dir.string());
  if (record.ok() && !record->identity.job_id.empty()) return record->identity.job_id;
  if (record.ok() && !record->identity.name.empty()) return record->identity.name;
  const fs::path absolute = fs::absolute(run_dir).lexically_normal();
  const std::string name =
      (absolute.has_filename() ? absolute : absolute.parent_path()).filename().string();
  return name.empty() ? run_dir.string() : name;
}

}  // namespace

bool LooksLikePath(const std::string& target) {
  std::error_code ec;
  return target.find('/') != std::string::npos || fs::exists(target, ec);
}

absl::StatusOr<MetricsLines> ReadRunMetrics(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such run directory"));
  }
  MetricsLines out;
  fs::path file = path;
  if (fs::is_directory(status)) {
    file = fs::path(path) / "metrics.jsonl";
    if (!fs::exists(file, ec)) {
      return absl::NotFoundError(absl::StrCat(file.string(), ": not found (is ", path,
                                              " a run directory? it has no metrics yet)"));
    }
    out.run_name = RunName(path);
  } else {
    const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
    out.run_name = RunName(dir);
  }
  out.origin = file.string();
  absl::StatusOr<std::string> text = ReadFileToString(file.string(), kMaxMetricsBytes);
  if (!text.ok()) return text.status();
  out.lines = SplitLines(*text);
  if (out.lines.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(out.origin, ": empty (the run has logged no step yet)"));
  }
  return out;
}

}  // namespace sbp::plot
