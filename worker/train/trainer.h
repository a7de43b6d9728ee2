// The training loop behind `sbp train` and the worker: load the model and the
// data, resume from the newest checkpoint of the run, then per optimizer step
// take `sequences_per_step` examples, run them in micro-batches through the
// objective with normalisers counted over the whole step, clip the global
// gradient norm, apply AdamW with the scheduled learning rate, append a line
// to <run>/metrics.jsonl and checkpoint every `checkpoint.every_steps` steps
// and at the end. Deterministic: a resumed run continues bit for bit.
//
// One loop for every device: the run opens `TrainOptions::device` through
// OpenComputeDevice, and weights, gradients, optimizer state, the one-layer
// cache and the engine's buffers all live in that device's allocator; only
// the backend differs. With train.precision bf16 the engine reads a bf16
// compute copy of the weights while AdamW updates fp32 masters (see
// optimizer_state.h).
//
// With resources.world_size N > 1 every rank runs this loop with a
// communicator: rank r takes examples r, r+N, ... of each step's global batch,
// gradients and optimizer state are sharded (ZeRO-2), the figures of a step
// are summed over the ranks, rank 0 writes metrics.jsonl, and the result
// equals one worker running the whole global batch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/allocator.h"
#include "nlohmann/json.hpp"
#include "worker/dist/communicator.h"
#include "worker/train/checkpoint_offload.h"
#include "worker/train/job_spec.h"

namespace sbp {

// Online GRPO's sampling in one step (grpo.rollout), over every rank.
struct RolloutReport {
  bool present = false;  // the job samples its completions online
  double reward_mean = 0;
  double reward_std = 0;              // population standard deviation over the step's completions
  double completion_length_mean = 0;  // new tokens per completion
  int64_t completion_length_max = 0;
  double truncated_fraction = 0;  // completions that hit max_new_tokens
  int64_t rollout_tokens = 0;     // new tokens sampled
  double rollout_seconds = 0;     // sampling and scoring (the slowest rank)
  double train_seconds = 0;       // the rest of the step: forward, backward, update
  double rollout_tokens_per_second = 0;
  nlohmann::json ToJson() const;
};

struct StepReport {
  int64_t step = 0;
  int64_t total_steps = 0;
  std::string time;  // when the step ended, RFC 3339 UTC with milliseconds
  double epoch = 0;  // passes over the data so far: examples taken / dataset size
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  int64_t tokens = 0;        // tokens processed in this step
  int64_t tokens_total = 0;  // since the start of the run (incl. before resume)
  double step_seconds = 0;
  double tokens_per_second = 0;
  double mfu = 0;          // model FLOP rate / the device's reference peak
  int64_t peak_bytes = 0;  // allocator peak since the run started
  int64_t current_bytes = 0;
  // The memory tiers (streambp.offload, train.optimizer_offload): where the
  // layer checkpoints live, the host memory the tiers hold now and at peak,
  // the disk tier's file, and this step's copies between the device and the
  // host or disk: bytes, seconds the copy queues ran, seconds the compute
  // waited for them. metrics.jsonl has them when a tier is off the device.
  std::string checkpoint_tier = "device";
  bool optimizer_offload = false;
  int64_t host_tier_bytes = 0;
  int64_t host_tier_peak_bytes = 0;
  int64_t disk_tier_bytes = 0;
  int64_t offload_copy_bytes = 0;
  double offload_copy_seconds = 0;
  double offload_wait_seconds = 0;
  nlohmann::json extra;  // objective figures (DPO accuracy, GRPO KL, ...)
  RolloutReport rollout;
  // The latest validation loss (`eval:`), computed after step eval_step
  // (0: none yet); metrics.jsonl has it on that step's line only.
  int64_t eval_step = 0;
  double eval_loss = 0;
  nlohmann::json ToJson() const;
};

// How a run begins.
struct RunStart {
  std::string run_dir;
  int64_t resumed_step = 0;    // the step the run continues after (0: from the start)
  std::string resumed_from;    // set when it starts from another run (resume_from)
  int64_t capacity_bytes = 0;  // the memory budget (0: none)
};

class TrainingObserver {
 public:
  virtual ~TrainingObserver() = default;
  virtual void OnStart(const JobSpec& spec, const RunStart& start) {}
  virtual void OnStep(const StepReport& report) {}
  virtual void OnCheckpoint(int64_t step, const std::string& path) {}
  // Polled before every step; true ends the run cleanly after the current
  // step (a checkpoint is written).
  virtual bool StopRequested() { return false; }
  // Polled before every sequence and after every layer of a backward: true
  // abandons the step at once, writing nothing (the run was cancelled or is
  // over at the coordinator), so that a step of any size ends within a
  // sequence or a layer. The run then ends as stopped early.
  virtual bool AbandonRequested() { return false; }
  // Asked before every step and before every write (metrics line,
  // checkpoint): an error — this attempt's lease lapsed — ends the run at
  // once, writing nothing more.
  virtual absl::Status CheckLease() { return absl::OkStatus(); }
};

struct TrainOptions {
  // Relative paths in the spec resolve against it: the owner's area on a
  // shared coordinator (worker/train/job_paths.h), the current directory for
  // `sbp train`.
  std::string base_dir = ".";
  // The job and attempt this run is (run_directory.h): the run directory
  // defaults to <base_dir>/runs/<job_id>, and the attempt is the run's
  // fencing token. Empty and 0 for a local run (`sbp train`).
  std::string job_id;
  int64_t attempt = 0;
  // The device this process trains on ("cpu", "cuda:N"); its kind must be
  // the job's resources.device.
  std::string device = "cpu";
  // Keep fp32 master weights apart from f32 compute weights too (always so
  // for bf16): the mixed-precision bookkeeping, testable on the CPU.
  bool separate_master = false;
  bool resume = true;           // continue from the newest checkpoint of the run
  int64_t stop_after_step = 0;  // > 0: stop (with a checkpoint) after this step
  // Connects this rank to the others (ZeRO-2; required for world_size > 1,
  // and a world of one rank runs ZeRO-2 too when given). The backend is the
  // run's: its device decides the communicator (Gloo or NCCL) and its
  // allocator holds the communicator's buffers.
  std::function<absl::StatusOr<std::unique_ptr<Communicator>>(Backend&)> connect;
  // Connects this rank to the others of its sequence group (`group_size`
  // ranks; required for resources.sequence_parallel > 1, with `connect`).
  std::function<absl::StatusOr<std::unique_ptr<Communicator>>(Backend&, int group_size)>
      connect_sequence_group;
  // Whether jobs may run reward programs (grpo.reward.command) here: true
  // for a local run, and on a shared worker only when its operator says so
  // (sbp-worker --allow-reward-programs), since the program runs as the worker.
  bool allow_reward_programs = true;
  // Host memory and local disk this worker offers the memory tiers
  // (streambp.offload: auto chooses among them; checkpoint_offload.h).
  OffloadResources offload;
};

struct TrainSummary {
  int64_t first_step = 0;  // the first step this run executed
  int64_t last_step = 0;   // the last completed step
  double final_loss = 0;
  bool stopped_early = false;
  std::string last_checkpoint;
  int64_t peak_bytes = 0;
};

absl::StatusOr<TrainSummary> RunTraining(const JobSpec& spec, const TrainOptions& options,
                                         TrainingObserver* observer);

}  // namespace sbp
