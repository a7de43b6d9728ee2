#include "server/identity.h"

#include <openssl/evp.h>
#include <sys/stat.h>

#include <cctype>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace sbp::server {
namespace {

constexpr int64_t kMaxUsersFileBytes = 4 << 20;

absl::Status Bad(absl::string_view source, absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", where, ": ", what));
}

bool IsHexDigest(absl::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::Status CheckKeys(const YAML::Node& node, std::initializer_list<absl::string_view> allowed,
                       absl::string_view source, const std::string& where) {
  for (const auto& item : node) {
    const std::string key = item.first.as<std::string>("");
    bool known = false;
    for (absl::string_view a : allowed) known |= key == a;
    if (!known) return Bad(source, where, absl::StrCat("unknown key '", key, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> NonNegative(const YAML::Node& node, absl::string_view source,
                                    const std::string& where) {
  int64_t value = -1;
  if (!node.IsScalar() || !YAML::convert<int64_t>::decode(node, value) || value < 0) {
    return Bad(source, where, "must be a non-negative integer");
  }
  return value;
}

// One entry of `users` or `workers`.
absl::Status ParseEntry(const YAML::Node& entry, bool worker, absl::string_view source,
                        const std::string& where, IdentityTable& table) {
  if (!entry.IsMap()) return Bad(source, where, "must be a mapping");
  if (worker) {
    RETURN_IF_ERROR(CheckKeys(entry, {"name", "token_sha256"}, source, where));
  } else {
    RETURN_IF_ERROR(CheckKeys(entry, {"name", "role", "token_sha256", "quota"}, source, where));
  }
  Identity identity;
  identity.name = entry["name"] && entry["name"].IsScalar() ? entry["name"].Scalar() : "";
  // A user's name is a directory of the work directory (its area): it must
  // start with a letter or digit, so that "." and ".." (the work directory
  // itself, its parent) and names like "-x" are never one.
  const std::string& name = identity.name;
  if (name.empty() || name.size() > 64 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_.") != std::string::npos ||
      !std::isalnum(static_cast<unsigned char>(name.front()))) {
    return Bad(source, where + ".name",
               absl::StrCat("'", absl::CHexEscape(name),
                            "' is not a name: 1-64 characters of lower-case letters, digits, "
                            "'-', '_' and '.', starting with a letter or digit"));
  }
  if (worker) {
    identity.role = IdentityRole::kWorker;
  } else {
    const std::string role =
        entry["role"] && entry["role"].IsScalar() ? entry["role"].Scalar() : "user";
    if (role == "user") {
      identity.role = IdentityRole::kUser;
    } else if (role == "admin") {
      identity.role = IdentityRole::kAdmin;
    } else {
      return Bad(source, where + ".role", absl::StrCat("must be user or admin (got '", role, "')"));
    }
    if (const YAML::Node quota = entry["quota"]; quota) {
      const std::string q = where + ".quota";
      if (!quota.IsMap()) return Bad(source, q, "must be a mapping");
      RETURN_IF_ERROR(
          CheckKeys(quota, {"max_running_workers", "max_pending_jobs", "max_priority"}, source, q));
      if (quota["max_running_workers"]) {
        ASSIGN_OR_RETURN(
            identity.quota.max_running_workers,
            NonNegative(quota["max_running_workers"], source, q + ".max_running_workers"));
      }
      if (quota["max_pending_jobs"]) {
        ASSIGN_OR_RETURN(identity.quota.max_pending_jobs,
                         NonNegative(quota["max_pending_jobs"], source, q + ".max_pending_jobs"));
      }
      if (quota["max_priority"]) {
        int64_t value = 0;
        if (!quota["max_priority"].IsScalar() ||
            !YAML::convert<int64_t>::decode(quota["max_priority"], value)) {
          return Bad(source, q + ".max_priority", "must be an integer");
        }
        identity.quota.max_priority = value;
      }
    }
  }
  const YAML::Node hashes = entry["token_sha256"];
  if (!hashes || !hashes.IsSequence() || hashes.size() == 0) {
    return Bad(source, where + ".token_sha256", "must list at least one hex SHA-256");
  }
  for (size_t i = 0; i < hashes.size(); ++i) {
    const std::string at = absl::StrCat(where, ".token_sha256[", i, "]");
    std::string hash = hashes[i].IsScalar() ? hashes[i].Scalar() : "";
    if (!IsHexDigest(hash)) {
      return Bad(source, at, "must be 64 hex digits (sha256sum of the token)");
    }
    absl::AsciiStrToLower(&hash);
    if (!table.by_token_hash.emplace(hash, table.identities.size()).second) {
      return Bad(source, at, "this token hash is listed twice");
    }
  }
  table.identities.push_back(std::move(identity));
  return absl::OkStatus();
}

int64_t FileStamp(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return -2;
  return (static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec) ^
         (static_cast<int64_t>(st.st_size) << 1);
}

}  // namespace

absl::string_view IdentityRoleName(IdentityRole role) {
  switch (role) {
    case IdentityRole::kUser:
      return "user";
    case IdentityRole::kAdmin:
      return "admin";
    case IdentityRole::kWorker:
      return "worker";
  }
  return "";
}

std::string TokenSha256(absl::string_view token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(token.data(), token.size(), digest, &length, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

absl::StatusOr<IdentityTable> IdentityTable::Parse(absl::string_view yaml,
                                                   absl::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid YAML: ", e.what()));
  }
  IdentityTable table;
  if (root.IsNull()) return table;
  if (!root.IsMap()) return Bad(source, "top level", "must be a mapping with users and workers");
  RETURN_IF_ERROR(CheckKeys(root, {"users", "workers"}, source, "top level"));
  for (auto [key, worker] : {std::pair{"users", false}, std::pair{"workers", true}}) {
    const YAML::Node list = root[key];
    if (!list || list.IsNull()) continue;
    if (!list.IsSequence()) return Bad(source, key, "must be a list");
    for (size_t i = 0; i < list.size(); ++i) {
      RETURN_IF_ERROR(ParseEntry(list[i], worker, source, absl::StrCat(key, "[", i, "]"), table));
    }
  }
  // Names are unique within users and within workers.
  for (size_t i = 0; i < table.identities.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      const Identity& a = table.identities[i];
      const Identity& b = table.identities[j];
      if (a.name == b.name && a.is_worker() == b.is_worker()) {
        return Bad(source, a.is_worker() ? "workers" : "users",
                   absl::StrCat("the name '", a.name, "' is listed twice"));
      }
    }
  }
  return table;
}

IdentityTable IdentityTable::FromTokens(absl::string_view client_token,
                                        absl::string_view worker_token) {
  IdentityTable table;
  if (!client_token.empty()) {
    table.by_token_hash.emplace(TokenSha256(client_token), table.identities.size());
    table.identities.push_back({"default", IdentityRole::kAdmin, {}});
  }
  if (!worker_token.empty()) {
    table.by_token_hash.emplace(TokenSha256(worker_token), table.identities.size());
    table.identities.push_back({"workers", IdentityRole::kWorker, {}});
  }
  return table;
}

absl::StatusOr<IdentityTable> LoadIdentityFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--users: cannot read ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("--users: ", path, " is not a regular file"));
  }
  if (st.st_size > kMaxUsersFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--users: ", path, " is larger than ", kMaxUsersFileBytes, " bytes"));
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::InvalidArgumentError(absl::StrCat("--users: cannot read ", path));
  }
  return IdentityTable::Parse(text.str(), path);
}

IdentityDirectory::IdentityDirectory(IdentityTable table, std::string path)
    : path_(std::move(path)),
      table_(std::make_shared<const IdentityTable>(std::move(table))),
      stamp_(path_.empty() ? -1 : FileStamp(path_)) {}

std::optional<Identity> IdentityDirectory::Lookup(absl::string_view token) const {
  if (token.empty()) return std::nullopt;
  const std::string hash = TokenSha256(token);
  std::shared_ptr<const IdentityTable> table;
  {
    absl::MutexLock lock(&mu_);
    table = table_;
  }
  const auto it = table->by_token_hash.find(hash);
  if (it == table->by_token_hash.end()) return std::nullopt;
  return table->identities[it->second];
}

bool IdentityDirectory::HasRole(IdentityRole role) const {
  absl::MutexLock lock(&mu_);
  for (const Identity& identity : table_->identities) {
    if (identity.role == role || (role == IdentityRole::kUser && identity.is_admin())) return true;
  }
  return false;
}

std::optional<Identity> IdentityDirectory::Find(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  for (const Identity& identity : table_->identities) {
    if (identity.name == name && !identity.is_worker()) return identity;
  }
  return std::nullopt;
}

absl::Status IdentityDirectory::Reload() {
  if (path_.empty()) return absl::OkStatus();
  const int64_t stamp = FileStamp(path_);
  absl::StatusOr<IdentityTable> table = LoadIdentityFile(path_);
  absl::MutexLock lock(&mu_);
  stamp_ = stamp;                          // a broken file is reported once, not on every check
  if (!table.ok()) return table.status();  // the old identities stay in force
  table_ = std::make_shared<const IdentityTable>(*std::move(table));
  return absl::OkStatus();
}

absl::Status IdentityDirectory::ReloadIfChanged() {
  if (path_.empty()) return absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    if (FileStamp(path_) == stamp_) return absl::OkStatus();
  }
  return Reload();
}

}  // namespace sbp::server
