#include "worker/dist/sharded_weights.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/device_store.h"

namespace sbp {

ShardedWeights::ShardedWeights(const ParameterStore& layout, Communicator& comm, Backend& backend,
                               CommExecutor& executor, DType dtype)
    : layout_(layout), comm_(comm), backend_(backend), executor_(executor), dtype_(dtype) {}

ShardedWeights::~ShardedWeights() { executor_.WaitAll().IgnoreError(); }

absl::StatusOr<std::unique_ptr<ShardedWeights>> ShardedWeights::Create(
    const ParameterStore& layout, const ParameterStore& initial, DType dtype, Communicator& comm,
    Backend& backend, CommExecutor& executor) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeRO-3 compute weights are f32 or bf16, not ", DTypeName(dtype)));
  }
  if (initial.groups().size() != layout.groups().size()) {
    return absl::InvalidArgumentError("ZeRO-3: the initial weights have another layout");
  }
  std::unique_ptr<ShardedWeights> weights(
      new ShardedWeights(layout, comm, backend, executor, dtype));
  const int n = comm.world_size(), rank = comm.rank();
  for (size_t g = 0; g < layout.groups().size(); ++g) {
    const ParameterGroup& group = layout.groups()[g];
    const Tensor& source = initial.groups()[g].flat;
    if (group.padded % n != 0 || source.dtype() != DType::kF32 || source.numel() != group.padded) {
      return absl::InvalidArgumentError(absl::StrCat("ZeRO-3: group ", group.name, " is not f32[",
                                                     group.padded, "] in ", n, " equal shards"));
    }
    const int64_t shard = group.padded / n;
    Tensor owned = source.Rows(rank * shard, (rank + 1) * shard);
    ASSIGN_OR_RETURN(Tensor compute, Tensor::Empty(backend.allocator(), {shard}, dtype,
                                                   absl::StrCat("weight shard ", group.name)));
    RETURN_IF_ERROR(CopyRoundedInto(owned, backend, compute, "weight shard staging"));
    weights->shards_.push_back(std::move(compute));
  }
  return weights;
}

bool ShardedWeights::is_layer(int group) const {
  return group != layout_.embed_group() && group != layout_.final_group();
}

ShardedWeights::Buffer* ShardedWeights::Find(int group) {
  if (!is_layer(group)) {
    Buffer& edge = edge_buffer(group);
    return edge.group == group ? &edge : nullptr;
  }
  for (Buffer& slot : slots_) {
    if (slot.group == group) return &slot;
  }
  return nullptr;
}

int64_t ShardedWeights::QueueGather(int group, Tensor& memory) {
  const int64_t shard = shards_[group].numel();
  Tensor owned = memory.Rows(comm_.rank() * shard, (comm_.rank() + 1) * shard);
  backend_.Copy(shards_[group], owned);
  void* data = memory.raw_data();
  const int64_t bytes = shard * static_cast<int64_t>(DTypeSize(dtype_));
  // The all-gather waits for the compute issued before it (the copy above).
  return executor_.Submit([this, data, bytes] { return comm_.AllGather(data, bytes); });
}

absl::StatusOr<ShardedWeights::Buffer*> ShardedWeights::StartGather(int group) {
  if (Buffer* found = Find(group)) return found;
  const ParameterGroup& layout = layout_.groups()[group];
  Buffer* buffer = nullptr;
  if (is_layer(group)) {
    // The slot not in use, or, when neither is, the one used longer ago.
    Buffer* a = &slots_[0];
    Buffer* b = &slots_[1];
    if (a->held && b->held) {
      return absl::InternalError(
          absl::StrCat("ZeRO-3: no free weight slot for ", layout.name, " (two layers held)"));
    }
    buffer = a->held ? b : b->held ? a : (a->last_used <= b->last_used ? a : b);
    // A gather into it may still be in flight (a prefetch never read).
    RETURN_IF_ERROR(executor_.WaitFor(buffer->ticket));
    if (!buffer->memory.defined()) {
      ASSIGN_OR_RETURN(buffer->memory, Tensor::Empty(backend_.allocator(), {layout.padded}, dtype_,
                                                     "gathered layer weights"));
    }
  } else {
    buffer = &edge_buffer(group);
    ASSIGN_OR_RETURN(buffer->memory, Tensor::Empty(backend_.allocator(), {layout.padded}, dtype_,
                                                   absl::StrCat("gathered weights ", layout.name)));
  }
  buffer->group = group;
  buffer->held = false;
  buffer->ticket = QueueGather(group, buffer->memory);
  return buffer;
}

absl::Status ShardedWeights::Acquire(int group, int next, ModelTensors& weights) {
  ASSIGN_OR_RETURN(Buffer * buffer, StartGather(group));
  buffer->held = true;
  buffer->last_used = ++uses_;
  RETURN_IF_ERROR(executor_.WaitFor(buffer->ticket));
  BindGroupTensors(layout_, group, buffer->memory, weights);
  if (next >= 0) RETURN_IF_ERROR(StartGather(next).status());
  return absl::OkStatus();
}

absl::Status ShardedWeights::Release(int group) {
  Buffer* buffer = Find(group);
  if (buffer == nullptr || !buffer->held) {
    return absl::InternalError(absl::StrCat("ZeRO-3: group ", group, " released but not held"));
  }
  buffer->held = false;
  if (!is_layer(group)) *buffer = Buffer();  // the edge groups' memory goes back
  return absl::OkStatus();
}

absl::Status ShardedWeights::Invalidate() {
  RETURN_IF_ERROR(executor_.WaitAll());
  for (Buffer& slot : slots_) {
    if (slot.held) return absl::InternalError("ZeRO-3: weights changed while a layer is held");
    slot.group = -1;
  }
  for (Buffer& edge : edge_) edge = Buffer();
  return absl::OkStatus();
}

absl::Status ShardedWeights::GatherToHost(int group, Tensor out) {
  const ParameterGroup& layout = layout_.groups()[group];
  ASSIGN_OR_RETURN(Tensor gathered, Tensor::Empty(backend_.allocator(), {layout.padded}, dtype_,
                                                  absl::StrCat("checkpoint gather ", layout.name)));
  RETURN_IF_ERROR(executor_.WaitFor(QueueGather(group, gathered)));
  if (!out.defined()) return absl::OkStatus();
  RETURN_IF_ERROR(CopyWidenedToHost(gathered, backend_, out));
  backend_.Synchronize();  // before the device buffers are released
  return absl::OkStatus();
}

}  // namespace sbp
