#include "worker/train/optimizer_state.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "common/check.h"
#include "common/status_macros.h"
#include "kernels/allocator.h"
#include "kernels/cpu/embedding_rows.h"
#include "worker/dist/zero2_state.h"
#include "worker/engine/device_store.h"
#include "worker/train/optimizer.h"
#include "worker/train/optimizer_offload.h"
#include "worker/train/sharded_checkpoint.h"

namespace sbp {
namespace {

// The embedding's gradient as a row set (kernels/cpu/embedding_rows.h) for
// the whole step, the norm and AdamW reading the rows as the dense gradient:
// on the CPU, for an untied embedding of a full (not LoRA) run. A tied
// embedding is also the LM head, whose gradient is dense.
bool UseEmbeddingRows(const ParameterStore& weights, const Backend& backend) {
  if (!backend.device().is_cpu() || weights.lora() != nullptr || weights.groups().empty()) {
    return false;
  }
  const ParameterGroup& embed = weights.groups()[weights.embed_group()];
  return !weights.config().tie_word_embeddings && embed.specs.size() == 1;
}

// Zeroed f32 gradients in `weights`' layout; with `embedding_rows` the
// embedding's group is left without memory.
absl::StatusOr<ParameterStore> CreateGradients(const ParameterStore& weights, Backend& backend,
                                               bool embedding_rows) {
  if (!embedding_rows) return ZeroStoreOnDevice(weights, backend, DType::kF32, "gradients");
  ParameterStore grads = weights;  // the layout; every buffer is replaced below
  for (size_t g = 0; g < grads.groups().size(); ++g) {
    ParameterGroup& group = grads.groups()[g];
    if (static_cast<int>(g) == grads.embed_group()) {
      group.Detach();
      continue;
    }
    ASSIGN_OR_RETURN(Tensor flat,
                     Tensor::Zeros(backend.allocator(), {group.padded}, DType::kF32, "gradients"));
    group.Attach(std::move(flat));
  }
  return grads;
}

class LocalOptimizerState final : public OptimizerState {
 public:
  LocalOptimizerState(ParameterStore& weights, std::optional<ParameterStore> master,
                      ParameterStore grads, AdamWOptimizer optimizer, Backend& backend,
                      int64_t embedding_row_capacity)
      : weights_(weights),
        master_(std::move(master)),
        grads_(std::move(grads)),
        bound_(BindModelTensors(grads_)),
        optimizer_(std::move(optimizer)),
        backend_(backend) {
    if (embedding_row_capacity > 0) {
      const ModelConfig& c = weights.config();
      rows_.emplace(backend.allocator(), c.vocab_size, c.hidden_size);
      bound_.embed_rows = &*rows_;
    }
  }
  // The row set's room, allocated once (Create, before the first step).
  absl::Status ReserveEmbeddingRows(int64_t capacity) {
    return rows_.has_value() ? rows_->Reserve(capacity) : absl::OkStatus();
  }

  ModelTensors& grads() override { return bound_; }
  void ZeroGradients() override {
    if (rows_.has_value()) rows_->Clear();
    ZeroStore(grads_, backend_);  // the row set's group has no memory
  }
  absl::Status FinishBackward() override { return absl::OkStatus(); }
  absl::StatusOr<double> GlobalGradNorm() override {
    const double norm = AdamWOptimizer::GlobalGradNorm(backend_, grads_, embed_rows());
    // A sum that found no device memory for its partials is void (not a
    // divergence).
    RETURN_IF_ERROR(backend_.TakeDeferredError());
    return norm;
  }
  absl::Status Update(double lr, int64_t step, float grad_scale) override {
    optimizer_.Step(masters(), grads_, lr, step, grad_scale, embed_rows());
    CastMastersIntoWeights();
    return absl::OkStatus();
  }
  absl::Status Save(const CheckpointSink& sink, const TrainerState& state,
                    int64_t keep_last) override {
    CpuAllocator host;
    ASSIGN_OR_RETURN(const ParameterStore w,
                     HostCopyOfStore(weights_, backend_, host, "checkpoint weights"));
    std::optional<ParameterStore> master;
    if (master_.has_value()) {
      ASSIGN_OR_RETURN(master, HostCopyOfStore(*master_, backend_, host, "checkpoint masters"));
    }
    ASSIGN_OR_RETURN(const ParameterStore m,
                     HostCopyOfStore(optimizer_.exp_avg(), backend_, host, "checkpoint exp_avg"));
    ASSIGN_OR_RETURN(const ParameterStore v, HostCopyOfStore(optimizer_.exp_avg_sq(), backend_,
                                                             host, "checkpoint exp_avg_sq"));
    return SaveCheckpoint(sink, w, master ? &*master : nullptr, m, v, state, keep_last);
  }
  absl::StatusOr<TrainerState> Load(const std::string& dir) override {
    CpuAllocator host;
    ASSIGN_OR_RETURN(ParameterStore w, HostStoreLike(weights_, host, "checkpoint weights"));
    ASSIGN_OR_RETURN(ParameterStore m, HostStoreLike(weights_, host, "checkpoint exp_avg"));
    ASSIGN_OR_RETURN(ParameterStore v, HostStoreLike(weights_, host, "checkpoint exp_avg_sq"));
    ASSIGN_OR_RETURN(TrainerState state, LoadCheckpoint(dir, w, m, v));
    RETURN_IF_ERROR(CopyStoreInto(w, backend_, masters()));
    CastMastersIntoWeights();
    RETURN_IF_ERROR(CopyStoreInto(m, backend_, optimizer_.exp_avg()));
    RETURN_IF_ERROR(CopyStoreInto(v, backend_, optimizer_.exp_avg_sq()));
    backend_.Synchronize();  // the host stores are released on return
    return state;
  }
  bool separate_master() const override { return master_.has_value(); }

 private:
  ParameterStore& masters() { return master_.has_value() ? *master_ : weights_; }
  // The row set, where the embedding's gradient is one (the norm and AdamW
  // read it as the dense gradient, bit for bit, without a dense buffer).
  const cpu::EmbeddingRowGradient* embed_rows() const {
    return rows_.has_value() ? &*rows_ : nullptr;
  }
  // compute copy <- round(masters), group by group.
  void CastMastersIntoWeights() {
    if (!master_.has_value()) return;
    for (size_t g = 0; g < weights_.groups().size(); ++g) {
      backend_.Cast(master_->groups()[g].flat, weights_.groups()[g].flat);
    }
  }

  ParameterStore& weights_;
  std::optional<ParameterStore> master_;
  ParameterStore grads_;
  ModelTensors bound_;
  AdamWOptimizer optimizer_;
  Backend& backend_;
  std::optional<cpu::EmbeddingRowGradient> rows_;  // set: the embedding's gradient as rows
};

class Zero2OptimizerState final : public OptimizerState {
 public:
  Zero2OptimizerState(ParameterStore& weights, std::unique_ptr<Zero2State> zero,
                      const TrainSpec& train, bool offload)
      : weights_(weights), zero_(std::move(zero)), train_(train), offload_(offload) {
    grads_.layers.resize(weights.config().num_hidden_layers);
  }

  ModelTensors& grads() override { return grads_; }
  void ZeroGradients() override { zero_->ZeroGradients(); }
  absl::Status FinishBackward() override { return zero_->FinishBackward().status(); }
  absl::StatusOr<double> GlobalGradNorm() override { return zero_->GlobalGradNorm(); }
  absl::Status Update(double lr, int64_t step, float grad_scale) override {
    return zero_->Step(AdamWStepParams(train_, lr, step, grad_scale), train_.weight_decay);
  }
  absl::Status Save(const CheckpointSink& sink, const TrainerState& state,
                    int64_t keep_last) override {
    return SaveShardedCheckpoint(sink, weights_, *zero_, state, keep_last);
  }
  absl::StatusOr<TrainerState> Load(const std::string& dir) override {
    return LoadShardedCheckpoint(dir, weights_, *zero_);
  }
  double comm_wait_seconds() const override { return zero_->comm_wait_seconds(); }
  bool separate_master() const override { return zero_->separate_master(); }
  int64_t host_current_bytes() const override {
    return offload_ ? zero_->backend().host_allocator().current_bytes() : 0;
  }
  int64_t host_peak_bytes() const override {
    return offload_ ? zero_->backend().host_allocator().peak_bytes() : 0;
  }

 private:
  ParameterStore& weights_;
  std::unique_ptr<Zero2State> zero_;
  TrainSpec train_;
  bool offload_;
  ModelTensors grads_;  // views bound by the sink while a group is open
};

}  // namespace

absl::StatusOr<std::unique_ptr<OptimizerState>> CreateOptimizerState(
    const OptimizerStateOptions& options, Backend& backend, const TrainSpec& train,
    Engine& engine) {
  CHECK(options.weights != nullptr && options.initial != nullptr);
  ParameterStore& weights = *options.weights;
  const bool f32_compute =
      options.shard_weights
          ? options.compute_dtype == DType::kF32
          : weights.groups().empty() || weights.groups()[0].flat.dtype() == DType::kF32;
  if (options.shard_weights && options.comm == nullptr) {
    return absl::InvalidArgumentError(
        "train.zero_stage: 3 shards the compute weights over the job's workers; it needs "
        "resources.world_size > 1");
  }
  if (!f32_compute && !options.separate_master) {
    return absl::InvalidArgumentError("a bf16 compute copy needs separate fp32 master weights");
  }
  if (options.offload && options.comm == nullptr) {
    return CreateOffloadedOptimizerState(options, backend, train, engine);
  }
  if (options.comm != nullptr) {
    if (options.offload && !backend.device().is_cpu()) {
      // The reduce-scatter adds into the owned shard on the communicator's
      // stream, which must then be device memory.
      return absl::FailedPreconditionError(
          "optimizer offload with world_size > 1 on cuda is not supported yet");
    }
    std::optional<WeightSharding> sharding;
    if (options.shard_weights) sharding = WeightSharding{options.initial, options.compute_dtype};
    ASSIGN_OR_RETURN(std::unique_ptr<Zero2State> zero,
                     Zero2State::Create(weights, *options.comm, backend,
                                        options.separate_master ? options.initial : nullptr,
                                        options.offload, sharding));
    engine.set_gradient_sink(zero.get());
    engine.set_weight_source(zero->sharded_weights());
    return std::unique_ptr<OptimizerState>(
        new Zero2OptimizerState(weights, std::move(zero), train, options.offload));
  }
  std::optional<ParameterStore> master;
  if (options.separate_master) {
    ASSIGN_OR_RETURN(master,
                     CopyStoreToDevice(*options.initial, backend, DType::kF32, "master weights"));
  }
  const int64_t row_capacity =
      UseEmbeddingRows(weights, backend)
          ? std::min(options.embedding_row_capacity, weights.config().vocab_size)
          : 0;
  ASSIGN_OR_RETURN(ParameterStore grads, CreateGradients(weights, backend, row_capacity > 0));
  ASSIGN_OR_RETURN(AdamWOptimizer optimizer, AdamWOptimizer::Create(weights, backend, train));
  auto state = std::make_unique<LocalOptimizerState>(weights, std::move(master), std::move(grads),
                                                     std::move(optimizer), backend, row_capacity);
  RETURN_IF_ERROR(state->ReserveEmbeddingRows(row_capacity));
  return std::unique_ptr<OptimizerState>(std::move(state));
}

}  // namespace sbp
