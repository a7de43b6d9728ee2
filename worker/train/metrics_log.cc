#include "worker/train/metrics_log.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/file_confinement.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/model/file_util.h"

namespace sbp {

absl::StatusOr<MetricsLog> MetricsLog::Open(const std::string& path, int64_t keep_through_step) {
  RETURN_IF_ERROR(CheckConfinedPath(path, FileAccess::kWrite));
  std::string kept;
  {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.value("step", int64_t{0}) <= keep_through_step) {
        absl::StrAppend(&kept, line, "\n");
      }
    }
  }
  RETURN_IF_ERROR(WriteFileAtomically(path, kept));
  // The file was just written in place; a link swapped in since is refused.
  ASSIGN_OR_RETURN(AppendFile file, AppendFile::Open(path, AppendFile::Mode::kExisting));
  return MetricsLog(std::move(file));
}

absl::Status MetricsLog::Append(absl::string_view line) {
  return file_.Append(absl::StrCat(line, "\n"));
}

}  // namespace sbp
