// Who is calling: the identities of a shared coordinator and how a bearer
// token maps to one.
//
// A users file (`sbp-coordinator --users FILE`, YAML) lists them:
//   users:
//     - name: alice
//       role: user                 # user | admin
//       token_sha256: [9f86d0...]  # hex SHA-256 of each bearer token
//       quota: {max_running_workers: 8, max_pending_jobs: 20, max_priority: 10}
//   workers:
//     - name: pool-a               # one entry per worker or per pool
//       token_sha256: [...]
// Plain tokens never rest on disk; a presented token is hashed and the hash
// looked up. `--client-token-file` / `--worker-token-file` are a single-user
// shorthand: one admin "default" and one worker identity "workers".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace sbp::server {

enum class IdentityRole { kUser, kAdmin, kWorker };
absl::string_view IdentityRoleName(IdentityRole role);  // "user", "admin", "worker"

struct Quota {
  int64_t max_running_workers = 0;      // workers its running jobs may hold; 0: no limit
  int64_t max_pending_jobs = 0;         // jobs waiting at once; 0: no limit
  std::optional<int64_t> max_priority;  // the highest priority it may ask for; none: no limit
};

struct Identity {
  std::string name;
  IdentityRole role = IdentityRole::kUser;
  Quota quota;
  bool is_admin() const { return role == IdentityRole::kAdmin; }
  bool is_worker() const { return role == IdentityRole::kWorker; }
};

// Hex SHA-256 of `token` (lower case).
std::string TokenSha256(absl::string_view token);

// The parsed identities. InvalidArgument naming the file, entry and field for
// anything malformed (a missing name, an unknown role, a hash that is not 64
// hex digits, the same hash twice, an unknown key).
struct IdentityTable {
  std::vector<Identity> identities;
  absl::flat_hash_map<std::string, size_t> by_token_hash;  // -> identities index
  static absl::StatusOr<IdentityTable> Parse(absl::string_view yaml, absl::string_view source);
  // The shorthand: client token -> admin "default", worker token -> "workers".
  static IdentityTable FromTokens(absl::string_view client_token, absl::string_view worker_token);
};

// The live directory, reloadable: lookups see either the old table or the
// new one, never half of one; a reload that fails keeps the old table.
class IdentityDirectory {
 public:
  explicit IdentityDirectory(IdentityTable table, std::string path = "");

  // nullopt: no identity has this token.
  std::optional<Identity> Lookup(absl::string_view token) const;
  // Any identity with this role at all (a role with none is "open").
  bool HasRole(IdentityRole role) const;
  std::optional<Identity> Find(absl::string_view name) const;

  // Re-reads the file it was loaded from (no-op without one).
  absl::Status Reload();
  // Reloads when the file's modification time or size changed since the last
  // load; cheap enough to call every second.
  absl::Status ReloadIfChanged();
  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const IdentityTable> table_ ABSL_GUARDED_BY(mu_);
  int64_t stamp_ ABSL_GUARDED_BY(mu_) = -1;  // mtime (ns) ^ size of the loaded file
};

// Reads and parses a users file (capped size, regular file).
absl::StatusOr<IdentityTable> LoadIdentityFile(const std::string& path);

}  // namespace sbp::server
