#include "worker/train/run_directory.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/failure_kind.h"
#include "common/file_confinement.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/model/file_util.h"
#include "worker/train/checkpoint.h"
#include "worker/train/checkpoint_argument.h"
#include "worker/train/checkpoint_layout.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kRunFile[] = "run.json";

// FNV-1a, 64 bits: a stable identity for a spec, not a security measure.
uint64_t Fnv1a(absl::string_view text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

absl::StatusOr<Json> ReadRunJson(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("spec_hash") || !j["spec_hash"].is_string() ||
      !j.contains("attempt") || !j["attempt"].is_number_integer()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": not a run record (expected job_id, spec_hash and attempt)"));
  }
  return j;
}

std::string StringField(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

RunRecord RecordFromJson(const Json& j) {
  RunRecord record;
  record.identity.job_id = StringField(j, "job_id");
  record.identity.spec_hash = j["spec_hash"].get<std::string>();
  record.identity.attempt = j["attempt"].get<int64_t>();
  record.identity.name = StringField(j, "name");
  record.claimed_at = StringField(j, "claimed_at");
  return record;
}

absl::StatusOr<RunIdentity> ReadIdentity(const std::string& path) {
  ASSIGN_OR_RETURN(const Json j, ReadRunJson(path));
  return RecordFromJson(j).identity;
}

std::string NowRfc3339() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
}

absl::Status WriteIdentity(const std::string& path, const RunIdentity& identity) {
  const Json j = {{"job_id", identity.job_id},
                  {"name", identity.name},
                  {"spec_hash", identity.spec_hash},
                  {"attempt", identity.attempt},
                  {"claimed_at", NowRfc3339()}};
  return WriteFileAtomically(path, j.dump() + "\n");
}

std::string Describe(const RunIdentity& identity) {
  return identity.job_id.empty() ? absl::StrCat("a local run (spec ", identity.spec_hash, ")")
                                 : absl::StrCat("job ", identity.job_id);
}

absl::Status StaleAttempt(const std::string& run_dir, int64_t mine, int64_t newest) {
  return WithFailureKind(absl::AbortedError(absl::StrCat("attempt ", mine, " is stale: attempt ",
                                                         newest, " has taken over ", run_dir,
                                                         "; this attempt writes nothing")),
                         FailureKind::kStaleAttempt);
}

}  // namespace

std::string TrajectoryHash(const JobSpec& spec) {
  Json j = Json::parse(JobSpecToJson(spec));
  j.erase("name");
  j.erase("checkpoint");
  j.erase("resume_from");
  j.erase("max_restarts");
  j.erase("priority");
  j.erase("log_every_steps");
  j["train"].erase("steps");
  j["resources"].erase("memory");
  j["resources"].erase("device");  // the same job may move between devices of a kind
  // Where checkpoints, optimizer state and compute weights live changes no bit of the
  // trajectory (and leaves the hash of runs made before the tiers existed as
  // it was): a run may resume with another tier.
  j["streambp"].erase("offload");
  j["train"].erase("optimizer_offload");
  j["train"].erase("zero_stage");  // ZeRO-3 gives ZeRO-2's bits (zero3_training_test)
  return absl::StrFormat("%016x", Fnv1a(j.dump()));
}

std::string RunDirectoryFor(const JobSpec& spec, const std::string& job_id,
                            const std::string& base_dir) {
  const std::string dir = !spec.checkpoint.dir.empty() ? spec.checkpoint.dir
                          : !job_id.empty()            ? absl::StrCat("runs/", job_id)
                                                       : absl::StrCat("runs/", spec.name);
  return fs::path(ResolveJobPath(base_dir, dir)).lexically_normal().string();
}

absl::StatusOr<RunFence> RunFence::Claim(const std::string& run_dir, const RunIdentity& identity,
                                         bool continue_run) {
  RETURN_IF_ERROR(CheckConfinedPath(run_dir, FileAccess::kWrite));
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", run_dir, ": ", ec.message()));
  const std::string path = run_dir + "/" + kRunFile;
  if (fs::exists(path, ec)) {
    ASSIGN_OR_RETURN(const RunIdentity recorded, ReadIdentity(path));
    const bool same_job = recorded.job_id == identity.job_id;
    if (!continue_run && (!same_job || recorded.spec_hash != identity.spec_hash)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint.dir: ", run_dir, " holds the run of ", Describe(recorded), ", not of this ",
          identity.job_id.empty() ? "spec" : absl::StrCat("job ", identity.job_id),
          (same_job ? " (its spec changed)" : ""),
          "; a job continues another's run only when asked: --resume ",
          recorded.job_id.empty() ? run_dir : recorded.job_id,
          " continues it in place, resume_from: ", run_dir,
          " starts a new run from it; or use another checkpoint.dir (or none: one per job)"));
    }
    if (same_job && recorded.attempt > identity.attempt) {
      return StaleAttempt(run_dir, identity.attempt, recorded.attempt);
    }
  } else if (!continue_run && fs::exists(run_dir + "/checkpoints", ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint.dir: ", run_dir,
                     " holds checkpoints of an unknown run (no run.json); --resume ", run_dir,
                     " continues it, resume_from: ", run_dir,
                     " starts a new run from them; or use another checkpoint.dir"));
  }
  RETURN_IF_ERROR(WriteIdentity(path, identity));
  RemoveStaleStaging(run_dir, identity.attempt);
  return RunFence(run_dir, identity);
}

absl::Status RunFence::Check() const {
  ASSIGN_OR_RETURN(const RunIdentity recorded, ReadIdentity(run_dir_ + "/" + kRunFile));
  if (recorded.job_id != identity_.job_id) {
    return WithFailureKind(
        absl::AbortedError(absl::StrCat("job ", recorded.job_id, " has taken over ", run_dir_,
                                        " (--resume); this attempt writes nothing")),
        FailureKind::kStaleAttempt);
  }
  if (recorded.attempt > identity_.attempt) {
    return StaleAttempt(run_dir_, identity_.attempt, recorded.attempt);
  }
  return absl::OkStatus();
}

bool ContinuesRun(const JobSpec& spec, const std::string& run_dir, const std::string& base_dir) {
  if (spec.resume_from.empty()) return false;
  const fs::path from = fs::path(ResolveJobPath(base_dir, spec.resume_from)).lexically_normal();
  const fs::path run = fs::path(run_dir).lexically_normal();
  auto trimmed = [](const fs::path& p) {
    std::string s = p.string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return s;
  };
  return trimmed(from) == trimmed(run);
}

absl::StatusOr<RunRecord> ReadRunRecord(const std::string& run_dir) {
  const std::string path = run_dir + "/" + kRunFile;
  std::error_code ec;
  if (!fs::exists(path, ec))
    return absl::NotFoundError(absl::StrCat(run_dir, " holds no run.json"));
  ASSIGN_OR_RETURN(const Json j, ReadRunJson(path));
  return RecordFromJson(j);
}

absl::Status RecordRunStop(const std::string& run_dir, const RunStop& stop) {
  const std::string path = run_dir + "/" + kRunFile;
  ASSIGN_OR_RETURN(Json j, ReadRunJson(path));
  j["stopped"] = {{"how", stop.how},
                  {"step", stop.step},
                  {"checkpoint", stop.checkpoint},
                  {"time", NowRfc3339()}};
  return WriteFileAtomically(path, j.dump() + "\n");
}

std::vector<std::string> FindRunsOfJob(const std::string& runs_root, const std::string& name) {
  std::vector<std::pair<std::string, std::string>> found;  // (claim time, directory)
  std::error_code ec;
  for (fs::directory_iterator it(runs_root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const std::string dir = it->path().string();
    absl::StatusOr<RunRecord> record = ReadRunRecord(dir);
    if (!record.ok()) continue;
    const bool named = record->identity.name.empty() ? it->path().filename() == name
                                                     : record->identity.name == name;
    if (!named) continue;
    std::string when = record->claimed_at;
    if (when.empty()) {  // a run recorded before claim times were: its file's age
      struct stat info {};
      if (::stat((dir + "/" + kRunFile).c_str(), &info) == 0) {
        when = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromTimeT(info.st_mtime),
                                absl::UTCTimeZone());
      }
    }
    found.emplace_back(when, dir);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::string> dirs;
  for (auto& [when, dir] : found) dirs.push_back(std::move(dir));
  return dirs;
}

absl::StatusOr<std::string> ResolveResumeFrom(const std::string& path) {
  const absl::StatusOr<std::string> resolved = ResolveCheckpointArgument("resume_from", path);
  if (resolved.ok() && IsCompleteCheckpoint(*resolved)) return *resolved;
  return absl::InvalidArgumentError(
      absl::StrCat("resume_from: ", path, " is neither a checkpoint nor a run directory with one"));
}

}  // namespace sbp
