// The pending jobs as the scheduler reads them, kept in scheduling order as
// jobs come and go instead of being rebuilt and sorted for every pass:
// priority (highest first), then each owner's jobs in FIFO order (the fair
// share among owners is merged per pass, server/scheduling_pass.h). Also
// counts jobs by owner (pending-job quotas), by resource shape (device and
// needs: which jobs any idle worker could take) and by wait cause (the
// sbp_pending_jobs gauge), and remembers the reason last written for each
// job so that only changed reasons are written.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "server/scheduler.h"

namespace sbp::server {

class PendingIndex {
 public:
  struct Entry {
    SchedulerJob job;
    std::string reason;                // as last written for the job
    std::optional<WaitCause> cause;    // of `reason`, once the scheduler gave one
    std::pair<int64_t, uint64_t> key;  // (seq, arrival): FIFO, ties in arrival order
  };
  // Device and needs (JobNeeds): the workers a job may use.
  using Shape = std::pair<DeviceKind, std::vector<WorkerNeed>>;
  // One owner's jobs at one priority, FIFO.
  using OwnerQueue = std::map<std::pair<int64_t, uint64_t>, const Entry*>;
  using Level = absl::flat_hash_map<std::string, OwnerQueue>;
  // Priority levels, highest first.
  using Levels = std::map<int, Level, std::greater<int>>;

  // Adds `job` waiting with `reason`; false (and no change) when it is
  // already there.
  bool Add(const SchedulerJob& job, std::string reason);
  void Remove(const std::string& id);
  Entry* Find(const std::string& id);
  const Entry* Find(const std::string& id) const;
  // Records the reason written for the job and its cause.
  void SetReason(Entry& entry, std::string reason, WaitCause cause);

  size_t size() const { return by_id_.size(); }
  bool empty() const { return by_id_.empty(); }
  int64_t CountOf(const std::string& owner) const;
  int64_t CountWith(WaitCause cause) const;
  std::vector<std::string> Owners() const;
  const absl::flat_hash_map<Shape, int64_t>& shapes() const { return shapes_; }
  const Levels& levels() const { return levels_; }
  // Every entry in FIFO order (for walks that resume where they stopped).
  const std::map<std::pair<int64_t, uint64_t>, Entry*>& fifo() const { return fifo_; }

 private:
  absl::node_hash_map<std::string, Entry> by_id_;
  std::map<std::pair<int64_t, uint64_t>, Entry*> fifo_;
  Levels levels_;
  absl::flat_hash_map<std::string, int64_t> owners_;
  absl::flat_hash_map<Shape, int64_t> shapes_;
  absl::flat_hash_map<WaitCause, int64_t> causes_;
  uint64_t arrivals_ = 0;
};

}  // namespace sbp::server
