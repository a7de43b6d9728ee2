#include "worker/train/optimizer_state.h"

#include "common/status_macros.h"
#include "worker/dist/zero2_state.h"
#include "worker/train/optimizer.h"
#include "worker/train/sharded_checkpoint.h"

namespace sbp {
namespace {

class LocalOptimizerState final : public OptimizerState {
 public:
  LocalOptimizerState(ParameterStore& weights, ParameterStore grads, AdamWOptimizer optimizer,
                      Backend& backend)
      : weights_(weights),
        grads_(std::move(grads)),
        bound_(BindModelTensors(grads_)),
        optimizer_(std::move(optimizer)),
        backend_(backend) {}

  ModelTensors& grads() override { return bound_; }
  void ZeroGradients() override { grads_.Zero(); }
  absl::Status FinishBackward() override { return absl::OkStatus(); }
  absl::StatusOr<double> GlobalGradNorm() override {
    return AdamWOptimizer::GlobalGradNorm(backend_, grads_);
  }
  absl::Status Update(double lr, int64_t step, float grad_scale) override {
    optimizer_.Step(weights_, grads_, lr, step, grad_scale);
    return absl::OkStatus();
  }
  absl::Status Save(const std::string& run_dir, const TrainerState& state,
                    int64_t keep_last) override {
    return SaveCheckpoint(run_dir, weights_, optimizer_.exp_avg(), optimizer_.exp_avg_sq(), state,
                          keep_last);
  }
  absl::StatusOr<TrainerState> Load(const std::string& dir) override {
    return LoadCheckpoint(dir, weights_, optimizer_.exp_avg(), optimizer_.exp_avg_sq());
  }

 private:
  ParameterStore& weights_;
  ParameterStore grads_;
  ModelTensors bound_;
  AdamWOptimizer optimizer_;
  Backend& backend_;
};

class Zero2OptimizerState final : public OptimizerState {
 public:
  Zero2OptimizerState(ParameterStore& weights, std::unique_ptr<Zero2State> zero,
                      const TrainSpec& train)
      : weights_(weights), zero_(std::move(zero)), train_(train) {
    grads_.layers.resize(weights.config().num_hidden_layers);
  }

  ModelTensors& grads() override { return grads_; }
  void ZeroGradients() override { zero_->ZeroGradients(); }
  absl::Status FinishBackward() override { return zero_->FinishBackward().status(); }
  absl::StatusOr<double> GlobalGradNorm() override { return zero_->GlobalGradNorm(); }
  absl::Status Update(double lr, int64_t step, float grad_scale) override {
    return zero_->Step(AdamWStepParams(train_, lr, step, grad_scale), train_.weight_decay);
  }
  absl::Status Save(const std::string& run_dir, const TrainerState& state,
                    int64_t keep_last) override {
    return SaveShardedCheckpoint(run_dir, weights_, *zero_, state, keep_last);
  }
  absl::StatusOr<TrainerState> Load(const std::string& dir) override {
    return LoadShardedCheckpoint(dir, weights_, *zero_);
  }
  double comm_wait_seconds() const override { return zero_->comm_wait_seconds(); }

 private:
  ParameterStore& weights_;
  std::unique_ptr<Zero2State> zero_;
  TrainSpec train_;
  ModelTensors grads_;  // views bound by the sink while a group is open
};

}  // namespace

absl::StatusOr<std::unique_ptr<OptimizerState>> CreateOptimizerState(ParameterStore& weights,
                                                                     Backend& backend,
                                                                     const TrainSpec& train,
                                                                     Communicator* comm,
                                                                     Engine& engine) {
  if (comm != nullptr && comm->world_size() > 1) {
    ASSIGN_OR_RETURN(std::unique_ptr<Zero2State> zero, Zero2State::Create(weights, *comm, backend));
    engine.set_gradient_sink(zero.get());
    return std::unique_ptr<OptimizerState>(
        new Zero2OptimizerState(weights, std::move(zero), train));
  }
  ASSIGN_OR_RETURN(ParameterStore grads,
                   ParameterStore::Create(weights.config(), backend.allocator(), "gradients"));
  ASSIGN_OR_RETURN(AdamWOptimizer optimizer,
                   AdamWOptimizer::Create(weights.config(), backend, train));
  return std::unique_ptr<OptimizerState>(
      new LocalOptimizerState(weights, std::move(grads), std::move(optimizer), backend));
}

}  // namespace sbp
