#include "worker/train/job_paths.h"

#include <deque>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

// `path` made absolute with every symbolic link in it resolved, whether or
// not what a link points to exists (as `realpath -m`): a dangling link is
// judged by where it points, so that a refusal never depends on whether the
// target exists. Empty (inside nothing) after 40 links, as for a loop.
fs::path Resolved(const fs::path& path) {
  std::deque<fs::path> todo;
  for (const fs::path& part : fs::absolute(path).relative_path()) todo.push_back(part);
  fs::path out = "/";
  int links = 0;
  while (!todo.empty()) {
    const fs::path part = todo.front();
    todo.pop_front();
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      out = out.parent_path();
      continue;
    }
    const fs::path next = out / part;
    std::error_code ec;
    if (fs::is_symlink(fs::symlink_status(next, ec))) {
      if (++links > 40) return fs::path();
      const fs::path target = fs::read_symlink(next, ec);
      if (!ec) {
        const fs::path relative = target.relative_path();
        todo.insert(todo.begin(), relative.begin(), relative.end());
        if (target.is_absolute()) out = "/";
        continue;
      }
    }
    out = next;
  }
  return out;
}

bool Inside(const fs::path& path, const fs::path& root) {
  if (path.empty()) return false;
  if (path == root) return true;
  const fs::path relative = path.lexically_relative(root);
  return !relative.empty() && *relative.begin() != ".." && relative != ".";
}

absl::Status Refuse(absl::string_view field, const std::string& value, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": '", value, "' ", rule));
}

struct Roots {
  fs::path area;
  std::vector<fs::path> shared;  // empty, or the shared directory
  std::string area_name;         // "your area alice/" or "the work directory"
};

Roots RootsOf(const PathPolicy& policy) {
  Roots roots;
  const fs::path work_dir = Resolved(fs::absolute(policy.work_dir));
  roots.area = policy.run_area.empty() ? work_dir : Resolved(work_dir / policy.run_area);
  if (!policy.shared_dir.empty()) roots.shared.push_back(Resolved(fs::absolute(policy.shared_dir)));
  roots.area_name = policy.run_area.empty() ? std::string("the work directory")
                                            : absl::StrCat("the owner's area ", policy.run_area);
  return roots;
}

bool InsideShared(const fs::path& resolved, const Roots& roots) {
  for (const fs::path& root : roots.shared) {
    if (Inside(resolved, root)) return true;
  }
  return false;
}

// One path of the spec (see job_paths.h); `writable`: checkpoint.dir and
// streambp.offload.disk_dir.
absl::Status CheckPath(absl::string_view field, const std::string& value, const Roots& roots,
                       bool writable) {
  if (value.empty()) return absl::OkStatus();
  const fs::path path(value);
  if (path.is_absolute()) {
    if (writable) {
      return Refuse(field, value,
                    absl::StrCat("must be relative (resolved in ", roots.area_name, ")"));
    }
    if (roots.shared.empty()) {
      return Refuse(field, value,
                    absl::StrCat("must be relative (resolved in ", roots.area_name,
                                 "); no shared directory is configured for absolute paths"));
    }
    if (InsideShared(Resolved(path), roots)) return absl::OkStatus();
    return Refuse(field, value,
                  "is outside the shared directory (an absolute path must lie in --shared-dir)");
  }
  for (const fs::path& part : path) {
    if (part == "..") return Refuse(field, value, "must not climb out with '..'");
  }
  const fs::path resolved = Resolved(roots.area / path);
  if (Inside(resolved, roots.area)) return absl::OkStatus();
  if (!writable && InsideShared(resolved, roots)) return absl::OkStatus();
  return Refuse(
      field, value,
      absl::StrCat("leads outside ", roots.area_name, writable ? "" : " and the shared directory",
                   " (a symbolic link points elsewhere)"));
}

}  // namespace

std::string JobArea(const PathPolicy& policy) {
  if (policy.work_dir.empty()) return "";
  return (fs::path(policy.work_dir) / policy.run_area).lexically_normal().string();
}

std::vector<std::string> JobReadRoots(const PathPolicy& policy) {
  std::vector<std::string> roots = {JobArea(policy)};
  if (!policy.shared_dir.empty()) roots.push_back(policy.shared_dir);
  return roots;
}

absl::Status CheckJobPaths(const JobSpec& spec, const PathPolicy& policy) {
  if (policy.work_dir.empty() || !policy.confine) return absl::OkStatus();
  const Roots roots = RootsOf(policy);
  RETURN_IF_ERROR(CheckPath("model", spec.model, roots, false));
  RETURN_IF_ERROR(CheckPath("data", spec.data, roots, false));
  if (spec.objective == Objective::kDpo) {
    RETURN_IF_ERROR(CheckPath("dpo.reference", spec.dpo.reference, roots, false));
  }
  if (spec.objective == Objective::kGrpo) {
    RETURN_IF_ERROR(CheckPath("grpo.reference", spec.grpo.reference, roots, false));
    RETURN_IF_ERROR(CheckPath("grpo.rollout.tokenizer", spec.grpo.rollout.tokenizer, roots, false));
  }
  RETURN_IF_ERROR(CheckPath("resume_from", spec.resume_from, roots, false));
  RETURN_IF_ERROR(CheckPath("eval.data", spec.eval.data, roots, false));
  RETURN_IF_ERROR(
      CheckPath("streambp.offload.disk_dir", spec.streambp.offload.disk_dir, roots, true));
  return CheckPath("checkpoint.dir", spec.checkpoint.dir, roots, true);
}

absl::Status CheckJobReadPath(const std::string& field, const std::string& path,
                              const PathPolicy& policy) {
  if (policy.work_dir.empty() || !policy.confine) return absl::OkStatus();
  const Roots roots = RootsOf(policy);
  const fs::path resolved = Resolved(fs::absolute(path));
  if (Inside(resolved, roots.area) || InsideShared(resolved, roots)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": '", path, "' leads outside ", roots.area_name,
                   roots.shared.empty() ? "" : " and the shared directory",
                   " (a symbolic link points elsewhere)"));
}

}  // namespace sbp
