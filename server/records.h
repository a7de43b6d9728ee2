// Plain records the coordinator keeps in SQLite: jobs, their events, the
// rank assignments of each attempt, and workers. No gRPC or protobuf types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "kernels/dtype.h"
#include "server/job_state.h"
#include "server/worker_need.h"

namespace sbp::server {

// Online GRPO's sampling in a step (see streambp.v1.RolloutProgress).
struct RolloutProgressRecord {
  double reward_mean = 0;
  double reward_std = 0;
  double completion_length_mean = 0;
  int64_t completion_length_max = 0;
  double truncated_fraction = 0;
  double rollout_tokens_per_second = 0;
  double rollout_seconds = 0;
  double train_seconds = 0;
  bool operator==(const RolloutProgressRecord&) const = default;
};

// Latest training progress of a job's current attempt (see streambp.v1.JobProgress).
struct ProgressRecord {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double learning_rate = 0;
  double grad_norm = 0;
  double tokens_per_second = 0;
  int64_t tokens_total = 0;
  double mfu = 0;
  int64_t peak_bytes = 0;
  int64_t current_bytes = 0;
  double step_seconds = 0;
  double eta_seconds = -1;
  double eval_loss = 0;
  int64_t eval_step = 0;                      // 0: no validation loss yet
  absl::Time updated_at = absl::UnixEpoch();  // epoch: never
  // The memory tiers (see streambp.v1.JobProgress).
  std::string checkpoint_tier;
  bool optimizer_offload = false;
  int64_t host_tier_bytes = 0;
  int64_t host_tier_peak_bytes = 0;
  int64_t disk_tier_bytes = 0;
  double offload_copy_bytes_per_second = 0;
  double offload_wait_seconds = 0;
  // Online GRPO's rollouts; unset for jobs that sample nothing online.
  std::optional<RolloutProgressRecord> rollout;
  bool operator==(const ProgressRecord&) const = default;
};

struct JobRecord {
  int64_t seq = 0;  // creation order, assigned by the store; orders List and FIFO
  std::string id;
  std::string name;
  std::string spec_yaml;
  std::string spec_json;  // canonical form (JobSpecToJson), compared for idempotency
  JobState state = JobState::kPending;
  std::string reason;
  int attempt = 0;  // 0 before the first start
  int max_restarts = 0;
  int priority = 0;
  int world_size = 1;
  DeviceKind device = DeviceKind::kCpu;
  int64_t required_memory_bytes = 0;  // per worker; 0: no requirement
  std::string request_id;             // "" when the client gave none
  int64_t revision = 0;               // increases with every change
  // The memory tiers, per worker (fixed at the submit): host memory and
  // offload disk beside required_memory_bytes (0: none), and other ways a
  // worker may hold the job (`checkpoints: auto`; server/worker_need.h).
  int64_t required_host_memory_bytes = 0;
  int64_t required_offload_disk_bytes = 0;
  std::vector<WorkerNeed> alternative_needs;
  FailureClass failure_class = FailureClass::kUnspecified;
  std::string last_checkpoint;
  ProgressRecord progress;
  std::vector<std::string> worker_ids;  // current (or last) attempt, by rank
  int64_t last_event_sequence = 0;
  absl::Time created_at = absl::UnixEpoch();
  absl::Time updated_at = absl::UnixEpoch();
  absl::Time queued_at = absl::UnixEpoch();    // latest entry into PENDING
  absl::Time started_at = absl::UnixEpoch();   // first RUNNING
  absl::Time finished_at = absl::UnixEpoch();  // terminal
  absl::Time active_at = absl::UnixEpoch();    // latest schedule or progress (stall clock)
  std::string owner;                           // the identity that submitted it ("" before tenancy)
  // Preemption. While the job runs, `preempted_by` names the pending job it
  // was asked to checkpoint and stop for, until `preempt_deadline` (the
  // grace); while it waits again, the job that preempted it. `preemptions`
  // counts the attempts preempted (not restarts: max_restarts ignores them).
  int preemptions = 0;
  std::string preempted_by;
  absl::Time preempt_deadline = absl::UnixEpoch();
  // Not stored: a cancelled job whose workers still hold its attempt (they
  // checkpoint where they stop and report it). Set when the job is read.
  bool stopping = false;
  bool operator==(const JobRecord&) const = default;
};

struct JobEventRecord {
  std::string job_id;
  int64_t sequence = 0;  // per job, from 1
  absl::Time time = absl::UnixEpoch();
  JobState from_state = JobState::kUnspecified;
  JobState to_state = JobState::kUnspecified;
  int attempt = 0;
  std::string reason;
  std::string message;  // log lines and checkpoint notices (from == to)
  bool operator==(const JobEventRecord&) const = default;
};

// One rank of one attempt. `active` until the worker is done with it (it
// finished, asked for new work, or was lost).
struct AssignmentRecord {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  std::string worker_id;
  bool active = true;
  std::string outcome;  // "", "SUCCEEDED", "FAILED", "CANCELLED", "LOST", "RELEASED"
  bool operator==(const AssignmentRecord&) const = default;
};

enum class WorkerState { kIdle, kBusy, kLost };
absl::string_view WorkerStateName(WorkerState state);  // "idle", "busy", "lost"

struct WorkerRecord {
  std::string id;
  std::string name;
  DeviceKind device = DeviceKind::kCpu;
  int64_t memory_bytes = 0;
  // What it offers the memory tiers (0: none; server/worker_need.h).
  int64_t host_memory_bytes = 0;
  int64_t offload_disk_bytes = 0;
  std::string version;
  absl::Time registered_at = absl::UnixEpoch();
  absl::Time last_heartbeat = absl::UnixEpoch();
  bool lost = false;
  std::string identity;  // the worker identity that first registered this id
  bool operator==(const WorkerRecord&) const = default;
};

inline absl::string_view WorkerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kIdle:
      return "idle";
    case WorkerState::kBusy:
      return "busy";
    case WorkerState::kLost:
      return "lost";
  }
  return "lost";
}

}  // namespace sbp::server
