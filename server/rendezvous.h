// In-memory key-value scopes for rendezvous (Gloo's store, the NCCL unique
// id): keys live in a scope "<job>/<attempt>" and die with the attempt
// (OpenScope when the attempt is scheduled, DropScope when it ends). Wait
// blocks until every key of a list exists.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sbp::server {

class RendezvousStore {
 public:
  static constexpr size_t kMaxValueBytes = 1 << 20;
  static constexpr size_t kMaxKeysPerScope = 100000;

  void OpenScope(const std::string& scope);
  // InvalidArgument for an oversized value, ResourceExhausted for a full
  // scope, Aborted for a scope that is not open.
  absl::Status Set(const std::string& scope, const std::string& key, std::string value);
  std::optional<std::string> Get(const std::string& scope, const std::string& key) const;
  // True once every key exists; false after `timeout`, when `cancelled()`
  // turns true (checked at least every 200 ms), or on Shutdown.
  bool Wait(const std::string& scope, const std::vector<std::string>& keys, absl::Duration timeout,
            const std::function<bool()>& cancelled);
  void DropScope(const std::string& scope);
  void Shutdown();
  size_t scope_count() const;

 private:
  bool HasAll(const std::string& scope, const std::vector<std::string>& keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, std::string>> scopes_
      ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sbp::server
