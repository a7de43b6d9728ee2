// Preemption, the pure part: which running jobs a pending job asks to
// checkpoint and stop when the idle workers do not fit it. Only jobs of
// strictly lower priority are candidates (server/scheduler.h decides when a
// job may preempt at all: never across its owner's quota, never while idle
// workers fit it). Among the candidates the fewest jobs that free enough
// fitting workers are chosen; among sets of that size, the lowest priorities
// first, then the newest jobs (they have the least work to lose).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sbp::server {

// A job that holds workers now (SCHEDULED or RUNNING).
struct RunningJob {
  std::string id;
  int64_t seq = 0;  // creation order
  int priority = 0;
  std::vector<std::string> worker_ids;  // by rank
  // The pending job it was asked to stop for ("" when not being preempted):
  // its workers are on their way to that job.
  std::string preempted_by;
};

// A pending job's request: these running jobs checkpoint and stop for it.
struct Preemption {
  std::string job_id;
  std::vector<std::string> victim_ids;
};

struct VictimCandidate {
  int priority = 0;
  int64_t seq = 0;
  int64_t fitting_workers = 0;  // the candidate's workers the pending job could use
};

// Indexes into `candidates` of the fewest jobs whose fitting workers add up
// to at least `deficit`, lowest priorities and then newest first among sets
// of that size; empty when all of them together free too few (or deficit <= 0).
std::vector<size_t> ChooseVictims(const std::vector<VictimCandidate>& candidates, int64_t deficit);

}  // namespace sbp::server
