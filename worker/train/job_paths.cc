#include "worker/train/job_paths.h"

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

// `path` with every symlink of its existing prefix resolved.
fs::path Resolved(const fs::path& path) {
  std::error_code ec;
  fs::path out = fs::weakly_canonical(path, ec);
  return ec ? path.lexically_normal() : out;
}

bool Inside(const fs::path& path, const fs::path& root) {
  const fs::path relative = path.lexically_relative(root);
  return !relative.empty() && *relative.begin() != "..";
}

absl::Status Refuse(absl::string_view field, const std::string& value, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": '", value, "' ", rule));
}

// One path: relative, no "..", inside one of `roots` once resolved.
absl::Status CheckPath(absl::string_view field, const std::string& value, const fs::path& work_dir,
                       const std::vector<fs::path>& roots, absl::string_view where) {
  if (value.empty()) return absl::OkStatus();
  const fs::path path(value);
  if (path.is_absolute()) {
    return Refuse(field, value, absl::StrCat("must be relative (resolved inside ", where, ")"));
  }
  for (const fs::path& part : path) {
    if (part == "..") return Refuse(field, value, "must not climb out with '..'");
  }
  for (const fs::path& root : roots) {
    const fs::path resolved = Resolved(root == roots.front() ? work_dir / path : root / path);
    if (Inside(resolved, root) || resolved == root) return absl::OkStatus();
  }
  return Refuse(field, value,
                absl::StrCat("leads outside ", where, " (a symbolic link points elsewhere)"));
}

}  // namespace

absl::Status CheckJobPaths(const JobSpec& spec, const PathPolicy& policy) {
  if (policy.work_dir.empty()) return absl::OkStatus();
  const fs::path work_dir = Resolved(fs::absolute(policy.work_dir));
  std::vector<fs::path> readable = {work_dir};
  std::string read_where = "the work directory";
  if (!policy.shared_dir.empty()) {
    readable.push_back(Resolved(fs::absolute(policy.shared_dir)));
    read_where = "the work directory or the shared directory";
  }
  RETURN_IF_ERROR(CheckPath("model", spec.model, work_dir, readable, read_where));
  RETURN_IF_ERROR(CheckPath("data", spec.data, work_dir, readable, read_where));
  if (spec.objective == Objective::kDpo) {
    RETURN_IF_ERROR(CheckPath("dpo.reference", spec.dpo.reference, work_dir, readable, read_where));
  }
  if (spec.objective == Objective::kGrpo) {
    RETURN_IF_ERROR(
        CheckPath("grpo.reference", spec.grpo.reference, work_dir, readable, read_where));
  }
  RETURN_IF_ERROR(CheckPath("resume_from", spec.resume_from, work_dir, readable, read_where));
  RETURN_IF_ERROR(CheckPath("eval.data", spec.eval.data, work_dir, readable, read_where));
  // The run directory is written: the owner's area only.
  const fs::path area = Resolved(work_dir / policy.run_area);
  const std::string area_where = policy.run_area.empty()
                                     ? std::string("the work directory")
                                     : absl::StrCat("the owner's area ", policy.run_area);
  RETURN_IF_ERROR(
      CheckPath("checkpoint.dir", spec.checkpoint.dir, work_dir, {work_dir}, "the work directory"));
  if (!spec.checkpoint.dir.empty() && !policy.run_area.empty()) {
    const fs::path resolved = Resolved(work_dir / spec.checkpoint.dir);
    if (!Inside(resolved, area)) {
      return Refuse("checkpoint.dir", spec.checkpoint.dir,
                    absl::StrCat("must lie in ", area_where, " (", policy.run_area, "...)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace sbp
