// Where a run's gradients and optimizer state live, behind one interface for
// the trainer: on a single worker a full gradient store and full AdamW
// moments; under ZeRO-2 (world_size > 1) the sharded state of Zero2State,
// whose gradients arrive through the engine's gradient sink.
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
  virtual absl::Status Update(double lr, int64_t step, float grad_scale) = 0;
  virtual absl::Status Save(const std::string& run_dir, const TrainerState& state,
                            int64_t keep_last) = 0;
  virtual absl::StatusOr<TrainerState> Load(const std::string& checkpoint_dir) = 0;
  // Seconds spent waiting on collectives so far (0 on a single worker).
  virtual double comm_wait_seconds() const { return 0; }
};

// `weights` outlives the state. With `comm` (world size > 1) the state is
// ZeRO-2 and installs itself as `engine`'s gradient sink; `weights` must then
// be padded to a multiple of the world size.
absl::StatusOr<std::unique_ptr<OptimizerState>> CreateOptimizerState(ParameterStore& weights,
                                                                     Backend& backend,
                                                                     const TrainSpec& train,
                                                                     Communicator* comm,
                                                                     Engine& engine);

}  // namespace sbp
