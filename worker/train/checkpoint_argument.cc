#include "worker/train/checkpoint_argument.h"

#include <filesystem>
#include <optional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "worker/train/checkpoint.h"
#include "worker/train/latest_link.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

bool Exists(const fs::path& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// `status` with "field: " in front of its message.
absl::Status Named(const std::string& field, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(field, ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::string> ResolveCheckpointArgument(const std::string& field,
                                                      const std::string& path) {
  // Trailing slashes would hide the last component ("latest/").
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const fs::path p(trimmed);
  // `latest` as a link or a text file (a real directory is just a directory).
  std::error_code ec;
  if (p.filename() == kLatestName && !fs::is_directory(fs::symlink_status(p, ec))) {
    const fs::path checkpoints = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    absl::StatusOr<std::string> name = ReadLatestName(checkpoints.string());
    if (name.ok()) {
      const fs::path named = checkpoints / *name;
      if (Exists(named)) return named.string();
      return absl::FailedPreconditionError(
          absl::StrCat(field, ": ", trimmed, " names ", *name, ", which does not exist"));
    }
    if (!absl::IsNotFound(name.status())) return Named(field, name.status());
  }
  if (Exists(p / "config.json") || Exists(p / "adapter_config.json")) return trimmed;
  // A run directory, or the checkpoints folder of one.
  std::optional<fs::path> run;
  if (Exists(p / "checkpoints") || Exists(p / "run.json")) {
    run = p;
  } else if (p.filename() == "checkpoints" && Exists(p)) {
    run = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  }
  if (!run.has_value()) return trimmed;
  const absl::StatusOr<std::optional<std::string>> latest = FindLatestCheckpoint(run->string());
  if (!latest.ok()) return Named(field, latest.status());
  if (!latest->has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": ", trimmed, " is a run directory with no checkpoint yet"));
  }
  return **latest;
}

}  // namespace sbp
