#include "server/pending_index.h"

namespace sbp::server {
namespace {

template <typename Map, typename Key>
void Decrement(Map& map, const Key& key) {
  auto it = map.find(key);
  if (it != map.end() && --it->second == 0) map.erase(it);
}

}  // namespace

bool PendingIndex::Add(const SchedulerJob& job, std::string reason) {
  auto [it, added] = by_id_.try_emplace(job.id);
  if (!added) return false;
  Entry& entry = it->second;
  entry.job = job;
  entry.reason = std::move(reason);
  entry.key = {job.seq, arrivals_++};
  fifo_.emplace(entry.key, &entry);
  levels_[job.priority][job.owner].emplace(entry.key, &entry);
  ++owners_[job.owner];
  ++shapes_[Shape(job.device, JobNeeds(job))];
  return true;
}

void PendingIndex::Remove(const std::string& id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  const Entry& entry = it->second;
  const SchedulerJob& job = entry.job;
  fifo_.erase(entry.key);
  auto level = levels_.find(job.priority);
  auto queue = level->second.find(job.owner);
  queue->second.erase(entry.key);
  if (queue->second.empty()) level->second.erase(queue);
  if (level->second.empty()) levels_.erase(level);
  Decrement(owners_, job.owner);
  Decrement(shapes_, Shape(job.device, JobNeeds(job)));
  if (entry.cause.has_value()) Decrement(causes_, *entry.cause);
  by_id_.erase(it);
}

PendingIndex::Entry* PendingIndex::Find(const std::string& id) {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

const PendingIndex::Entry* PendingIndex::Find(const std::string& id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

void PendingIndex::SetReason(Entry& entry, std::string reason, WaitCause cause) {
  entry.reason = std::move(reason);
  if (entry.cause == cause) return;
  if (entry.cause.has_value()) Decrement(causes_, *entry.cause);
  entry.cause = cause;
  ++causes_[cause];
}

int64_t PendingIndex::CountOf(const std::string& owner) const {
  auto it = owners_.find(owner);
  return it == owners_.end() ? 0 : it->second;
}

int64_t PendingIndex::CountWith(WaitCause cause) const {
  auto it = causes_.find(cause);
  return it == causes_.end() ? 0 : it->second;
}

std::vector<std::string> PendingIndex::Owners() const {
  std::vector<std::string> out;
  out.reserve(owners_.size());
  for (const auto& [owner, count] : owners_) out.push_back(owner);
  return out;
}

}  // namespace sbp::server
