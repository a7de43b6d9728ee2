#include "server/rendezvous.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sbp::server {

absl::Status RendezvousStore::Set(const std::string& scope, const std::string& key,
                                  std::string value) {
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value: ", value.size(), " bytes is more than the limit of ", kMaxValueBytes));
  }
  absl::MutexLock lock(&mu_);
  auto it = scopes_.find(scope);
  if (it == scopes_.end()) {
    return absl::AbortedError(absl::StrCat("scope ", scope, " is closed: its attempt is over"));
  }
  auto& keys = it->second;
  if (keys.size() >= kMaxKeysPerScope && !keys.contains(key)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("scope ", scope, " already holds ", keys.size(), " keys"));
  }
  keys[key] = std::move(value);
  changed_.SignalAll();
  return absl::OkStatus();
}

std::optional<std::string> RendezvousStore::Get(const std::string& scope,
                                                const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = scopes_.find(scope);
  if (it == scopes_.end()) return std::nullopt;
  auto kv = it->second.find(key);
  if (kv == it->second.end()) return std::nullopt;
  return kv->second;
}

bool RendezvousStore::HasAll(const std::string& scope, const std::vector<std::string>& keys) const {
  auto it = scopes_.find(scope);
  if (it == scopes_.end()) return keys.empty();
  return std::all_of(keys.begin(), keys.end(),
                     [&](const std::string& k) { return it->second.contains(k); });
}

bool RendezvousStore::Wait(const std::string& scope, const std::vector<std::string>& keys,
                           absl::Duration timeout, const std::function<bool()>& cancelled) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (true) {
    if (HasAll(scope, keys)) return true;
    if (shutdown_ || absl::Now() >= deadline) return false;
    if (cancelled && cancelled()) return false;
    changed_.WaitWithDeadline(&mu_, std::min(deadline, absl::Now() + absl::Milliseconds(200)));
  }
}

void RendezvousStore::OpenScope(const std::string& scope) {
  absl::MutexLock lock(&mu_);
  scopes_.try_emplace(scope);
}

void RendezvousStore::DropScope(const std::string& scope) {
  absl::MutexLock lock(&mu_);
  scopes_.erase(scope);
}

void RendezvousStore::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  changed_.SignalAll();
}

size_t RendezvousStore::scope_count() const {
  absl::MutexLock lock(&mu_);
  return scopes_.size();
}

}  // namespace sbp::server
