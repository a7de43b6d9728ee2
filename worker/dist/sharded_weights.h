// ZeRO-3's compute weights on one rank (`train.zero_stage: 3`): the rank's
// 1/N shard of every parameter group, in the compute dtype, and the engine's
// WeightSource, which all-gathers a group into a buffer holding all of it
// just before the engine reads it.
//
// Rank r owns elements [r*S, (r+1)*S) of each padded group (S = padded / N),
// the same elements whose gradients, masters and moments ZeRO-2 gives it, so
// the optimizer writes its updated masters straight into its weight shard
// and nothing is all-gathered after a step.
//
// Gathered memory (what the planner counts as `gathered_layer_weights` and
// `gathered_edge_weights`):
//   - layers share two slots of one layer group each, allocated at first use
//     and kept: the layer being read and the next one, whose gather the
//     engine's `next` hint starts while the current layer computes. A slot
//     keeps its layer until the shards change (Invalidate), so a pass that
//     reads it again (the backward after the forward, the next sequence)
//     gathers nothing.
//   - the embedding and the final group (norm and untied LM head) get a
//     buffer of their own from the acquire that names them as `next` (or
//     their own) until their release.
//
// Gathers run on the ZeRO-2 state's communication thread (`executor`), so
// that they reach the communicator in one order on every rank, interleaved
// with the reduce-scatters the same way everywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/dist/comm_executor.h"
#include "worker/dist/communicator.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"

namespace sbp {

class ShardedWeights final : public WeightSource {
 public:
  // This rank's shards of `initial` (f32, host or device memory, `layout`'s
  // groups, padded to a multiple of comm.world_size()), rounded to `dtype`
  // on the backend's device. `layout` (may be layout-only), `comm`,
  // `backend` and `executor` must outlive this object.
  static absl::StatusOr<std::unique_ptr<ShardedWeights>> Create(const ParameterStore& layout,
                                                                const ParameterStore& initial,
                                                                DType dtype, Communicator& comm,
                                                                Backend& backend,
                                                                CommExecutor& executor);
  ~ShardedWeights() override;

  // WeightSource.
  absl::Status Acquire(int group, int next, ModelTensors& weights) override;
  absl::Status Release(int group) override;

  // The compute shard of `group`: [padded / N] in the compute dtype.
  Tensor& shard(int group) { return shards_[group]; }
  int64_t shard_elements(int group) const { return shards_[group].numel(); }
  // After the shards changed (an optimizer step, a resume): forgets every
  // gathered copy, once the gathers in flight have landed.
  absl::Status Invalidate();
  // Collective: the whole of group `group` into `out` (host f32, [padded]),
  // through a device buffer of the group freed on return. Every rank calls
  // it; a rank that needs no copy passes an undefined `out`.
  absl::Status GatherToHost(int group, Tensor out);

 private:
  // Memory that holds a whole gathered group.
  struct Buffer {
    Tensor memory;       // [padded] compute dtype
    int group = -1;      // the group it holds (or is gathering); -1: none
    int64_t ticket = 0;  // the gather's, on the executor
    bool held = false;   // between Acquire and Release
    int64_t last_used = 0;
  };
  ShardedWeights(const ParameterStore& layout, Communicator& comm, Backend& backend,
                 CommExecutor& executor, DType dtype);
  bool is_layer(int group) const;
  // The buffer that holds or gathers `group`, starting its gather if none does.
  absl::StatusOr<Buffer*> StartGather(int group);
  Buffer* Find(int group);
  // Copies this rank's shard into `memory` and queues the all-gather.
  int64_t QueueGather(int group, Tensor& memory);

  const ParameterStore& layout_;
  Communicator& comm_;
  Backend& backend_;
  CommExecutor& executor_;
  const DType dtype_;
  std::vector<Tensor> shards_;
  // The embedding's or the final group's own buffer.
  Buffer& edge_buffer(int group) { return edge_[group == layout_.embed_group() ? 0 : 1]; }

  Buffer slots_[2];  // layers
  Buffer edge_[2];   // embed, final
  int64_t uses_ = 0;
};

}  // namespace sbp
