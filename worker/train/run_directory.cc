#include "worker/train/run_directory.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/failure_kind.h"
#include "common/file_confinement.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/model/file_util.h"
#include "worker/train/checkpoint.h"

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

absl::StatusOr<RunIdentity> ReadIdentity(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("spec_hash") || !j["spec_hash"].is_string() ||
      !j.contains("attempt") || !j["attempt"].is_number_integer()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": not a run record (expected job_id, spec_hash and attempt)"));
  }
  RunIdentity identity;
  identity.job_id = j.value("job_id", "");
  identity.spec_hash = j["spec_hash"].get<std::string>();
  identity.attempt = j["attempt"].get<int64_t>();
  return identity;
}

absl::Status WriteIdentity(const std::string& path, const RunIdentity& identity) {
  const Json j = {{"job_id", identity.job_id},
                  {"spec_hash", identity.spec_hash},
                  {"attempt", identity.attempt}};
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
  return ResolveJobPath(base_dir, dir);
}

absl::StatusOr<RunFence> RunFence::Claim(const std::string& run_dir, const RunIdentity& identity) {
  RETURN_IF_ERROR(CheckConfinedPath(run_dir, FileAccess::kWrite));
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", run_dir, ": ", ec.message()));
  const std::string path = run_dir + "/" + kRunFile;
  if (fs::exists(path, ec)) {
    ASSIGN_OR_RETURN(const RunIdentity recorded, ReadIdentity(path));
    if (recorded.job_id != identity.job_id || recorded.spec_hash != identity.spec_hash) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint.dir: ", run_dir, " holds the run of ", Describe(recorded), ", not of this ",
          identity.job_id.empty() ? "spec" : absl::StrCat("job ", identity.job_id),
          (recorded.job_id == identity.job_id ? " (its spec changed)" : ""),
          "; a new job never resumes another's run: set resume_from: ", run_dir,
          " to start from it, or use another checkpoint.dir (or none: one per job)"));
    }
    if (recorded.attempt > identity.attempt) {
      return StaleAttempt(run_dir, identity.attempt, recorded.attempt);
    }
  } else if (fs::exists(run_dir + "/checkpoints", ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint.dir: ", run_dir,
        " holds checkpoints of an unknown run (no run.json); set resume_from: ", run_dir,
        " to start from them, or use another checkpoint.dir"));
  }
  RETURN_IF_ERROR(WriteIdentity(path, identity));
  RemoveStaleStaging(run_dir, identity.attempt);
  return RunFence(run_dir, identity);
}

absl::Status RunFence::Check() const {
  ASSIGN_OR_RETURN(const RunIdentity recorded, ReadIdentity(run_dir_ + "/" + kRunFile));
  if (recorded.attempt > identity_.attempt) {
    return StaleAttempt(run_dir_, identity_.attempt, recorded.attempt);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResolveResumeFrom(const std::string& path) {
  std::error_code ec;
  if (fs::exists(path + "/trainer_state.json", ec)) return path;
  if (fs::is_directory(path, ec)) {
    ASSIGN_OR_RETURN(const std::optional<std::string> latest, FindLatestCheckpoint(path));
    if (latest.has_value()) return *latest;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("resume_from: ", path, " is neither a checkpoint nor a run directory with one"));
}

}  // namespace sbp
