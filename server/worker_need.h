// What a job needs of each worker it runs on, as the scheduler and admission
// compare it with what a worker offers: device memory, host memory for the
// memory tiers (offloaded layer checkpoints, optimizer state) and offload
// disk (the disk tier `checkpoints: auto` may choose). A job may have several
// needs, one per way it can run (`checkpoints: auto`: the device tier, the
// host tier, the disk tier); a worker fits the job when it meets one of them.
//
// A worker offering 0 host memory or 0 offload disk offers none (it did not
// report any: an older worker, or a disk tier not offered to `auto`); a need
// of 0 asks for none.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sbp::server {

struct WorkerNeed {
  int64_t memory_bytes = 0;        // device memory; 0: any
  int64_t host_memory_bytes = 0;   // 0: none
  int64_t offload_disk_bytes = 0;  // 0: none
  bool operator==(const WorkerNeed&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const WorkerNeed& n) {
    return H::combine(std::move(h), n.memory_bytes, n.host_memory_bytes, n.offload_disk_bytes);
  }
};

// What a worker offers (see above for 0).
struct WorkerOffer {
  int64_t memory_bytes = 0;
  int64_t host_memory_bytes = 0;
  int64_t offload_disk_bytes = 0;
};

bool Meets(const WorkerOffer& offer, const WorkerNeed& need);
// True when `offer` meets any of `needs` (an empty list asks for nothing).
bool MeetsAny(const WorkerOffer& offer, const std::vector<WorkerNeed>& needs);

// ">= 9.1 GiB", ">= 2.0 GiB and >= 300.0 GiB host memory", ">= 2.0 GiB,
// >= 1.0 GiB host memory and >= 28.0 GiB offload disk"; "" for a need of nothing.
std::string NeedText(const WorkerNeed& need);

// " with >= 9.1 GiB or >= 2.0 GiB and >= 300.0 GiB host memory" (the needs
// that ask for something, joined by "or"); "" when none does.
std::string NeedsClause(const std::vector<WorkerNeed>& needs);

// `needs` without those that ask for at least as much of everything as an
// earlier one (a worker meeting them meets the earlier one too), in order.
std::vector<WorkerNeed> WithoutDominated(const std::vector<WorkerNeed>& needs);

// The text form kept in the database: "[[memory, host, disk], ...]"; what
// does not parse reads as no needs.
std::string NeedsToJson(const std::vector<WorkerNeed>& needs);
std::vector<WorkerNeed> NeedsFromJson(const std::string& text);

}  // namespace sbp::server
