// Where a run's gradients and optimizer state live, behind one interface for
// the trainer: on a single worker a full gradient store and full AdamW
// moments; under ZeRO-2 (a communicator) the sharded state of Zero2State,
// whose gradients arrive through the engine's gradient sink. Everything
// lives on the backend's device, except with optimizer offload
// (optimizer_offload.h; under ZeRO-2 the owned shards), where gradients,
// masters and moments live in host memory and the CPU updates them;
// checkpoints pass through host memory.
//
// Mixed precision. The engine reads the compute copy of the weights (bf16
// or f32). AdamW updates fp32 master weights: the compute copy itself when
// it is f32, else separate masters (full on one worker, the owned 1/N shard
// under ZeRO-2), after which the masters are cast into the compute copy (and
// under ZeRO-2 the compute copy's shards are all-gathered). Gradients are
// always f32 and accumulate across chunks, micro-batches and sequences.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/dist/communicator.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/train/checkpoint.h"
#include "worker/train/job_spec.h"

namespace sbp {

class OptimizerState {
 public:
  virtual ~OptimizerState() = default;
  // The gradients the objective writes into (bound group by group by the
  // sink under ZeRO-2).
  virtual ModelTensors& grads() = 0;
  virtual void ZeroGradients() = 0;
  // After the step's last backward pass: waits for outstanding communication.
  virtual absl::Status FinishBackward() = 0;
  virtual absl::StatusOr<double> GlobalGradNorm() = 0;
  // AdamW on the masters, then the compute copy from them.
  virtual absl::Status Update(double lr, int64_t step, float grad_scale) = 0;
  virtual absl::Status Save(const CheckpointSink& sink, const TrainerState& state,
                            int64_t keep_last) = 0;
  // Restores masters, moments and the compute copy from a checkpoint.
  virtual absl::StatusOr<TrainerState> Load(const std::string& checkpoint_dir) = 0;
  // Seconds spent waiting on collectives so far (0 on a single worker).
  virtual double comm_wait_seconds() const { return 0; }
  // True when the run keeps fp32 masters apart from the compute copy (what
  // its checkpoints carry; offloaded masters are always apart in memory).
  virtual bool separate_master() const = 0;

  // Optimizer offload's figures (0 without offload): bytes copied between
  // device and host so far, seconds the copy queue ran them, seconds the
  // compute waited for them, and the backend's host_allocator() use (current
  // and peak bytes).
  virtual int64_t offload_copied_bytes() const { return 0; }
  virtual double offload_busy_seconds() const { return 0; }
  virtual double offload_wait_seconds() const { return 0; }
  virtual int64_t host_current_bytes() const { return 0; }
  virtual int64_t host_peak_bytes() const { return 0; }
};

struct OptimizerStateOptions {
  // The compute copy the engine reads (on the backend's device, f32 or bf16);
  // outlives the state. Under ZeRO-2 it must be padded to a multiple of the
  // world size.
  ParameterStore* weights = nullptr;
  // The full-precision starting values (f32, host or device, `weights`'
  // layout): where separate masters start from. May be `weights` itself when
  // the masters are not separate.
  const ParameterStore* initial = nullptr;
  // Keep separate fp32 masters. Required for a bf16 compute copy; with f32
  // compute weights it exercises the same bookkeeping (the results are then
  // bit-identical to shared masters).
  bool separate_master = false;
  Communicator* comm = nullptr;  // non-null: ZeRO-2, installed as `engine`'s sink
  // Gradients, masters and moments in host memory, updated by the CPU
  // (optimizer_offload.h; under ZeRO-2 the owned shards). Not yet with
  // ZeRO-2 on CUDA (FailedPrecondition).
  bool offload = false;
  // ZeRO-3 (needs `comm`): `weights` is a layout-only store and each rank
  // keeps its shard of the compute copy, in `compute_dtype`, built from
  // `initial`; the engine gets it as its weight source.
  bool shard_weights = false;
  DType compute_dtype = DType::kF32;
  // On one worker without offload, on the CPU, for an untied full model:
  // when > 0, keep the embedding's gradient as the rows of the step's tokens
  // (kernels/cpu/embedding_rows.h), in room for this many rows reserved up
  // front (EmbeddingRowCapacity, planner.h: the step's token count, below
  // the vocabulary), instead of a V x H buffer; the global norm and AdamW
  // read the rows as the dense gradient, bit for bit, so no dense table is
  // ever made. Elsewhere ignored: under ZeRO-2 the embedding's group is
  // reduce-scattered dense (see Zero2State); with offload the gradients are
  // the host state's. The memory planner counts it the same way
  // (PlanRequest::embedding_row_sequences).
  int64_t embedding_row_capacity = 0;
};

absl::StatusOr<std::unique_ptr<OptimizerState>> CreateOptimizerState(
    const OptimizerStateOptions& options, Backend& backend, const TrainSpec& train, Engine& engine);

}  // namespace sbp
