// The worker side of the control plane: registers with the coordinator
// (device, memory capacity, host memory and offload disk for the memory
// tiers, version), renews its lease with heartbeats on its
// own thread, long-polls for assignments and runs each one with the trainer
// (exactly what `sbp train` runs), reporting progress every step and the
// outcome at the end. It rides out coordinator restarts: failed calls are
// retried with capped exponential backoff, a coordinator that forgot the
// worker gets it re-registered under its old id, and training continues
// while progress waits to be re-sent.
//
// Cancellation (cancel_requested in a progress answer) and Stop() both end a
// run after its current step, with a checkpoint. A cancelled run finishes as
// CANCELLED. A run interrupted by Stop() (the worker shutting down) reports its
// last progress and checkpoint but no outcome: the protocol has no way to say
// "this worker is leaving", and an outcome would make the scheduler hand the
// retry straight back to this worker. The coordinator retries the attempt
// (LOST_WORKER) on another worker from that checkpoint once the lease expires. A run the
// coordinator has given up on (ABORTED progress, or listed in a heartbeat's stop_attempts) stops
// the same way, without an outcome.
//
// Preemption (checkpoint_and_stop in a progress answer, or the attempt listed
// in a heartbeat's checkpoint_attempts) ends the run at its next step
// boundary too, every rank at the same step, with a checkpoint; it finishes
// as PREEMPTED and the coordinator resumes the job later from there.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/dtype.h"
#include "streambp/v1/workers.grpc.pb.h"
#include "worker/agent/output_shipper.h"
#include "worker/agent/worker_metrics.h"

namespace sbp {

struct ProgressUpdate;

struct AgentOptions {
  std::string coordinator;        // "host:port"
  std::string token;              // worker bearer token; "" sends none
  std::string name;               // shown by `sbp workers`; "" = hostname-pid
  Device device = Device::Cpu();  // what jobs train on ("cpu", "cuda:N")
  int64_t memory_bytes = 0;       // capacity advertised and allocator budget enforced
  std::string work_dir = ".";     // relative paths of job specs resolve here
  std::string shared_dir;         // read-only job paths may also lie here
  bool confine_paths = true;      // false: any path goes (`sbp run`'s local workers)
  std::string metrics_listen;     // "host:port" for /metrics; "" = none
  std::string tls_ca_path;        // PEM roots for TLS to the coordinator; "" = plaintext
  int compute_threads = 0;        // OpenMP threads for training; 0 = the runtime's default
  // What this worker offers the memory tiers (streambp.offload,
  // train.optimizer_offload), advertised at registration and handed to the
  // trainer: host memory for offloaded state (0: none advertised; the
  // trainer then leaves host memory unchecked) and the local disk
  // `checkpoints: auto` may fill with the disk tier (0: none for auto; an
  // explicit disk tier is bounded by the disk itself).
  int64_t host_memory_bytes = 0;
  int64_t offload_disk_bytes = 0;
  // Multi-worker jobs: the address this worker's collectives listen on, as
  // the other ranks reach it, and the bound on every collective (a dead peer
  // fails the attempt within it).
  std::string collective_host = "127.0.0.1";
  std::chrono::milliseconds collective_timeout = std::chrono::seconds(60);
  // Online GRPO jobs may run their reward program (grpo.reward.command) as
  // this worker's user: off unless the operator allows it.
  bool allow_reward_programs = false;
};

class WorkerAgent {
 public:
  // Validates the options, opens the channel and the metrics endpoint.
  static absl::StatusOr<std::unique_ptr<WorkerAgent>> Create(AgentOptions options);
  ~WorkerAgent();
  WorkerAgent(const WorkerAgent&) = delete;
  WorkerAgent& operator=(const WorkerAgent&) = delete;

  // Serves assignments until Stop(). Returns an error only when the
  // coordinator rejects the worker for good (bad token, invalid registration).
  absl::Status Run();
  // Thread-safe; ends Run() after the current step of a running job.
  void Stop();

  std::string worker_id() const;
  std::string metrics_address() const { return metrics_->address(); }
  const AgentOptions& options() const { return options_; }

 private:
  class Observer;
  explicit WorkerAgent(AgentOptions options);

  bool stopping() const { return stopping_.load(); }
  bool RunningAttemptStopped() const;
  // The coordinator preempted the running attempt: checkpoint and stop.
  bool CheckpointRequested() const;
  // Notes a preemption of `job_id` attempt `attempt` if it is the running one.
  void RequestCheckpoint(const std::string& job_id, int attempt);
  // The local lease. The coordinator gives a worker `lease` seconds after it
  // receives a heartbeat before it declares the worker lost and may hand its
  // attempt to another worker. The worker counts the same lease from when it
  // SENT its last heartbeat that the coordinator accepted for the running
  // attempt, minus a safety margin of a quarter of the lease, and stops
  // writing once that runs out (heartbeats go every third of the lease, so
  // a healthy worker renews well before): sent time <= received
  // time, so the worker always stops at least the margin before the
  // coordinator may reassign (with the default 15 s lease and 5 s heartbeat:
  // the worker stops writing 11.25 s after its last renewal, the
  // coordinator acts after 15 s). An unrenewed attempt waits at its next
  // write: a restarted coordinator that still knows the worker renews it
  // and the attempt goes on; one that declared the worker lost (a paused or
  // partitioned worker) ends it, as does no answer for 10 leases.
  absl::Status CheckLease(const streambp::v1::Assignment& assignment) const;
  // Waits up to `duration` or until Stop().
  void SleepFor(std::chrono::milliseconds duration);

  // Registers (again, under the old id) unless registered. Errors that
  // retrying cannot fix are returned as is; others are UNAVAILABLE.
  absl::Status EnsureRegistered();
  void HeartbeatLoop();
  absl::StatusOr<std::optional<streambp::v1::Assignment>> PollAssignment();
  void RunAssignment(const streambp::v1::Assignment& assignment);
  // A rank whose run another rank ended asks the coordinator (one heartbeat)
  // whether its attempt was preempted or is over, and notes the answer.
  void LearnWhyStopped(const streambp::v1::Assignment& assignment);
  absl::StatusOr<bool> SendProgress(const streambp::v1::Assignment& assignment,
                                    const ProgressUpdate& update);
  void SendFinish(const streambp::v1::FinishRequest& request);
  // One batch of the running job's output (AppendOutput).
  absl::Status SendOutput(const streambp::v1::Assignment& assignment,
                          const OutputShipper::Batch& batch);

  AgentOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<streambp::v1::WorkerService::Stub> stub_;
  std::unique_ptr<WorkerMetrics> metrics_;
  // The running job's output (sbp logs, sbp metrics); set and read only on
  // the thread that runs assignments.
  OutputShipper* output_ = nullptr;

  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> current_bytes_{0};
  std::atomic<int64_t> peak_bytes_{0};

  mutable absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  int heartbeat_seconds_ ABSL_GUARDED_BY(mu_) = 5;
  // The local lease (see CheckLease): the coordinator's lease duration and
  // when the last heartbeat that renewed it was sent.
  int lease_seconds_ ABSL_GUARDED_BY(mu_) = 15;
  std::chrono::steady_clock::time_point lease_renewed_at_ ABSL_GUARDED_BY(mu_) =
      std::chrono::steady_clock::now();
  grpc::ClientContext* poll_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The attempt being trained, and whether a heartbeat said it is over.
  std::string running_job_ ABSL_GUARDED_BY(mu_);
  int running_attempt_ ABSL_GUARDED_BY(mu_) = -1;
  bool running_stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool running_checkpoint_ ABSL_GUARDED_BY(mu_) = false;  // preempted
  bool lease_lost_ ABSL_GUARDED_BY(mu_) = false;  // the coordinator declared this worker lost
  absl::Mutex register_mu_;  // one Register call at a time (main and heartbeat threads)
  std::thread heartbeat_thread_;
};

}  // namespace sbp
