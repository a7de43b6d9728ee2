#include "server/preemption.h"

#include <algorithm>
#include <functional>
#include <numeric>

namespace sbp::server {
namespace {

// Whether `count` of the not yet `taken` candidates can free `deficit`
// workers (the largest ones do, if any do).
bool Coverable(const std::vector<VictimCandidate>& candidates, const std::vector<bool>& taken,
               int64_t deficit, size_t count) {
  if (deficit <= 0) return true;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!taken[i]) sizes.push_back(candidates[i].fitting_workers);
  }
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  sizes.resize(std::min(sizes.size(), count));
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) >= deficit;
}

}  // namespace

std::vector<size_t> ChooseVictims(const std::vector<VictimCandidate>& candidates, int64_t deficit) {
  if (deficit <= 0) return {};
  std::vector<bool> taken(candidates.size(), false);
  // The fewest jobs that can do it: the largest ones first.
  size_t fewest = 0;
  while (fewest <= candidates.size() && !Coverable(candidates, taken, deficit, fewest)) ++fewest;
  if (fewest > candidates.size()) return {};
  // Then, in the order of preference, take each job that still leaves a set
  // of `fewest` jobs possible.
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (candidates[a].priority != candidates[b].priority) {
      return candidates[a].priority < candidates[b].priority;
    }
    return candidates[a].seq > candidates[b].seq;
  });
  std::vector<size_t> chosen;
  while (deficit > 0) {
    for (size_t i : order) {
      if (taken[i] || candidates[i].fitting_workers <= 0) continue;
      taken[i] = true;
      const int64_t left = deficit - candidates[i].fitting_workers;
      if (Coverable(candidates, taken, left, fewest - chosen.size() - 1)) {
        chosen.push_back(i);
        deficit = left;
        break;
      }
      taken[i] = false;
    }
  }
  return chosen;
}

}  // namespace sbp::server
