// ZeRO-2 on one rank. Every rank keeps the full compute weights (a
// ParameterStore padded so that each group splits into world_size equal
// shards); rank r owns elements [r*S, (r+1)*S) of every group (S = padded
// size / world_size): their fp32 gradient shard and Adam moments, and the
// fp32 master weights of that shard. With f32 compute weights the master
// shard can be the weights' own elements; with a separate master (bf16
// compute weights, or on request) it is a shard of its own, initialised
// from the full-precision source, and after AdamW it is cast into the
// compute copy's shard before the all-gather — which then moves compute
// weights (bf16: half the bytes), never fp32 masters.
//
// Every buffer lives on the backend's device and every element operation
// goes through the backend or the communicator (which adds a reduced shard
// into its owner's gradient on its own stream), so the same code runs on
// the CPU with Gloo and on a GPU with NCCL.
//
// As the engine's GradientSink it hands the backward a zeroed group-sized
// buffer for each group and, when the group is complete, reduce-scatters it
// on the communication thread and adds the owned chunk to the gradient
// shard. Layers share two buffers (the one-layer cache, double-buffered: the
// reduce-scatter of layer l runs while layer l-1 accumulates); the embedding
// and final groups get a buffer of their own for as long as they are open.
//
// The embedding's gradient stays dense here (one worker keeps it as a row
// set, kernels/cpu/embedding_rows.h): its buffer is open only for the
// embedding backward, after the last layer, when the layers' activations are
// gone, so it does not set the pass's peak (the LM head's phase holds the
// head's buffer of the same size and a logits chunk). Reducing row sets
// instead would take an all-gather of every rank's ids and a reduce-scatter
// of the union's rows, whose per-element cross-rank sum order (the
// collective's chunking) differs from the dense group's, so the owned shards
// would no longer match the dense path bit for bit.
//
// Optimizer offload (Create's `offload`): the owned shards (gradient, masters,
// moments) live in the backend's host_allocator() and a CPU backend over that
// memory runs their element operations (zeroing, sums of squares, AdamW, the
// cast to the compute dtype); the master shard is then always a tensor of its
// own, copied into the compute copy's shard before the all-gather, while
// separate_master() still says what the checkpoints carry. The communicator
// adds each reduced chunk into host memory, so this takes a communicator
// that works on host memory (Gloo on the CPU).
//
// ZeRO-3 (Create's `sharding`): the compute weights are sharded too
// (sharded_weights.h): `weights` is then only the layout (it may have no
// memory), each rank keeps the compute copy of its own elements, the
// engine gathers a group when it reads it, and a step casts the masters into
// the rank's compute shard with no all-gather afterwards.
//
// Ranks may run different numbers of backward passes in a step (uneven
// data): each pass starts with an all-reduce of an "active" flag, and a rank
// that has finished its own passes joins the others' with empty passes
// (zero contributions) until no rank is active.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/dist/comm_executor.h"
#include "worker/dist/communicator.h"
#include "worker/dist/sharded_weights.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"

namespace sbp {

// What ZeRO-3 builds its compute shards from.
struct WeightSharding {
  const ParameterStore* initial = nullptr;  // f32 values, the layout's groups
  DType dtype = DType::kF32;                // the compute dtype
};

class Zero2State final : public GradientSink {
 public:
  // `weights` (the compute copy) must be padded to a multiple of
  // comm.world_size() and outlive this object. With `master_source` (f32,
  // host or device, `weights`' layout) the master shards are separate and
  // start from its values; without it they are the f32 weights themselves
  // (with `offload`, a host copy of the weights' owned elements).
  static absl::StatusOr<std::unique_ptr<Zero2State>> Create(
      ParameterStore& weights, Communicator& comm, Backend& backend,
      const ParameterStore* master_source = nullptr, bool offload = false,
      std::optional<WeightSharding> sharding = std::nullopt);
  ~Zero2State() override;

  // GradientSink.
  absl::Status BeginPass() override;
  absl::Status Acquire(int group, ModelTensors& grads) override;
  absl::Status Release(int group) override;

  // Zeroes the gradient shards (start of a step).
  void ZeroGradients();
  // Ends the step's backward on this rank: joins the other ranks' remaining
  // passes, then waits for every reduce-scatter. Returns the number of empty
  // passes this rank joined.
  absl::StatusOr<int> FinishBackward();
  // sqrt of the sum of squares of the whole (global) gradient.
  absl::StatusOr<double> GlobalGradNorm();
  // AdamW with `params` (weight decay `weight_decay` where WeightDecayFor
  // allows it) on the owned master shard of every group, the cast into the
  // compute copy when the master is separate, then the all-gather that gives
  // every rank the new compute weights.
  absl::Status Step(AdamWParams params, double weight_decay);
  // After each rank wrote its master shard (a resume): the compute copy
  // from the masters on every rank (cast when separate, then all-gather).
  absl::Status RefreshComputeWeights();

  int64_t shard_elements(int group) const { return shard_[group]; }
  // ZeRO-3's compute weights (the engine's weight source); null under ZeRO-2.
  ShardedWeights* sharded_weights() { return sharded_.get(); }
  bool separate_master() const { return separate_; }
  // The f32 master shard of group `group`: a tensor of its own, or a view of
  // the weights' owned elements.
  Tensor master_shard(int group) const;
  // Empty unless separate or offloaded.
  std::vector<Tensor>& master_shards() { return master_; }
  std::vector<Tensor>& gradient_shards() { return grad_; }
  std::vector<Tensor>& exp_avg_shards() { return m_; }
  std::vector<Tensor>& exp_avg_sq_shards() { return v_; }
  Communicator& communicator() { return comm_; }
  Backend& backend() { return backend_; }
  // Seconds the training thread waited on communication so far.
  double comm_wait_seconds() const { return executor_.blocked_seconds(); }

 private:
  Zero2State(ParameterStore& weights, Communicator& comm, Backend& backend);
  // A group's gradient buffer: a slot of the one-layer cache for layers
  // (slot 0 or 1), a buffer of its own (slot -1) for the other groups.
  struct GroupBuffer {
    Tensor tensor;
    int slot = -1;
  };
  // A zero-filled buffer with group `group`'s layout.
  absl::StatusOr<GroupBuffer> TakeBuffer(int group);
  // Queues the reduce-scatter of `buffer` into group `group`'s shard.
  void QueueReduceScatter(int group, GroupBuffer buffer);
  // All-reduce (max) of this rank's "has another backward pass" flag.
  absl::StatusOr<bool> AnyRankActive(bool active);
  absl::Status EmptyPass();
  bool is_layer(int group) const;
  // Casts the master shards into the compute copy (when separate) and
  // all-gathers the compute copy.
  absl::Status PublishWeights();
  // The backend that works on the owned shards: the CPU's when offloaded.
  Backend& owner() { return host_ != nullptr ? *host_ : backend_; }
  // compute shard <- master shard of `group` (rounded to its dtype).
  absl::Status CastMasterIntoComputeShard(int group, Tensor& owned);

  ParameterStore& weights_;
  Communicator& comm_;
  Backend& backend_;
  std::vector<int64_t> shard_;        // shard elements per group
  std::vector<Tensor> grad_, m_, v_;  // owned shards per group
  std::vector<Tensor> master_;        // f32 master shards of their own (else empty)
  bool separate_ = false;             // masters apart from an f32 compute copy
  std::unique_ptr<Backend> host_;     // offload: the CPU's ops on host shards
  Tensor cache_[2];                   // the one-layer cache
  int64_t cache_ticket_[2] = {0, 0};  // reduce-scatter using each slot
  int next_slot_ = 0;
  std::vector<std::optional<GroupBuffer>> open_;  // buffers handed to the backward
  CommExecutor executor_;
  // Declared after the executor it queues gathers on, so destroyed first.
  std::unique_ptr<ShardedWeights> sharded_;
};

}  // namespace sbp
