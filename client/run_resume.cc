#include "client/run_resume.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/train/checkpoint.h"
#include "worker/train/run_directory.h"

namespace sbp::cli {
namespace {

namespace fs = std::filesystem;

// `base`/`path` without "./" noise, as a user would type it.
std::string Join(const std::string& base, const std::string& path) {
  return fs::path(ResolveJobPath(base, path)).lexically_normal().string();
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

}  // namespace

CLI::Option* AddResumeOption(CLI::App& command, ResumeFlag& flag) {
  return command
      .add_option("--resume", flag.target,
                  "continue an earlier run in place: the newest run of this job's name, or "
                  "the run directory or job id given")
      ->expected(0, 1);
}

absl::Status TakeResumeFlag(const CLI::Option& option, ResumeFlag& flag, std::string& spec_path) {
  flag.given = option.count() > 0;
  std::error_code ec;
  if (spec_path.empty() && flag.given && !flag.target.empty() &&
      fs::is_regular_file(flag.target, ec)) {
    spec_path = flag.target;  // `--resume job.yaml`: the file is the spec
    flag.target.clear();
  }
  if (spec_path.empty()) return absl::InvalidArgumentError("job: a job spec (YAML) is required");
  return absl::OkStatus();
}

bool HoldsRun(const std::string& run_dir) {
  std::error_code ec;
  return fs::exists(fs::path(run_dir) / "run.json", ec) ||
         fs::exists(fs::path(run_dir) / "checkpoints", ec);
}

std::string DescribeRun(const std::string& run_dir) {
  absl::StatusOr<std::optional<std::string>> latest = FindLatestCheckpoint(run_dir);
  if (!latest.ok() || !latest->has_value()) return absl::StrCat(run_dir, " (no checkpoint yet)");
  return absl::StrCat(run_dir, " (last checkpoint ", fs::path(**latest).filename().string(), ")");
}

std::optional<std::string> NewestLocalRun(const std::string& base_dir, const std::string& name) {
  const std::vector<std::string> runs = FindRunsOfJob(Join(base_dir, "runs"), name);
  if (runs.empty()) return std::nullopt;
  return fs::path(runs.front()).lexically_normal().string();
}

absl::StatusOr<std::string> LocalRunToResume(const JobSpec& spec, const ResumeFlag& flag,
                                             const std::string& base_dir) {
  std::string run_dir;
  if (!flag.target.empty()) {
    const std::string as_path = Join(base_dir, flag.target);
    const std::string as_id = Join(base_dir, absl::StrCat("runs/", flag.target));
    if (IsDirectory(as_path)) {
      run_dir = as_path;
    } else if (IsDirectory(as_id)) {
      run_dir = as_id;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--resume ", flag.target, ": no such run directory (nor ", as_id, ")"));
    }
  } else if (!spec.checkpoint.dir.empty()) {
    run_dir = Join(base_dir, spec.checkpoint.dir);
  } else {
    std::optional<std::string> newest = NewestLocalRun(base_dir, spec.name);
    if (!newest.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resume: no run of job ", spec.name, " under ", Join(base_dir, "runs"),
                       " to continue; leave --resume out to start one, or name the run "
                       "(--resume RUN_DIR)"));
    }
    run_dir = *newest;
  }
  if (!HoldsRun(run_dir)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--resume: ", run_dir, " is not a run directory (it holds no run.json or checkpoints)"));
  }
  return run_dir;
}

absl::StatusOr<std::string> SpecContinuingRun(const std::string& spec_yaml,
                                              const std::string& run_dir) {
  try {
    YAML::Node root = YAML::Load(spec_yaml);
    if (!root.IsMap()) return absl::InvalidArgumentError("the job spec is not a YAML mapping");
    root["resume_from"] = run_dir;
    if (!root["checkpoint"] || !root["checkpoint"].IsMap()) {
      root["checkpoint"] = YAML::Node(YAML::NodeType::Map);
    }
    root["checkpoint"]["dir"] = run_dir;
    YAML::Emitter out;
    out << root;
    if (!out.good()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write the job spec with --resume: ", out.GetLastError()));
    }
    return absl::StrCat(out.c_str(), "\n");
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the job spec: ", e.what()));
  }
}

absl::StatusOr<std::string> LocalRunForNewJob(const JobSpec& spec, const std::string& base_dir,
                                              std::string* not_resumed) {
  not_resumed->clear();
  if (!spec.checkpoint.dir.empty()) {
    const std::string dir = Join(base_dir, spec.checkpoint.dir);
    if (HoldsRun(dir)) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint.dir: ", DescribeRun(dir),
                       " holds an earlier run; continue it with --resume, or choose another "
                       "checkpoint.dir (or none: a new directory per run)"));
    }
    return dir;
  }
  if (std::optional<std::string> newest = NewestLocalRun(base_dir, spec.name)) {
    *not_resumed = *newest;
  }
  const std::string first = Join(base_dir, absl::StrCat("runs/", spec.name));
  if (!HoldsRun(first)) return first;
  if (not_resumed->empty()) *not_resumed = first;
  for (int n = 2;; ++n) {
    const std::string dir = absl::StrCat(first, "-", n);
    std::error_code ec;
    if (!fs::exists(dir, ec)) return dir;
  }
}

}  // namespace sbp::cli
