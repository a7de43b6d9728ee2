#include "worker/dist/zero2_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/cpu_backend.h"

namespace sbp {

Zero2State::Zero2State(ParameterStore& weights, Communicator& comm, Backend& backend)
    : weights_(weights), comm_(comm), backend_(backend) {}

Zero2State::~Zero2State() { executor_.WaitAll().IgnoreError(); }

absl::StatusOr<std::unique_ptr<Zero2State>> Zero2State::Create(
    ParameterStore& weights, Communicator& comm, Backend& backend,
    const ParameterStore* master_source, bool offload, std::optional<WeightSharding> sharding) {
  const int n = comm.world_size();
  std::unique_ptr<Zero2State> state(new Zero2State(weights, comm, backend));
  // Where the owned shards live, and the backend that works on them.
  Allocator& allocator = offload ? backend.host_allocator() : backend.allocator();
  if (offload) state->host_ = std::make_unique<CpuBackend>(allocator);
  Backend& owner = state->owner();
  state->separate_ = master_source != nullptr;
  const auto& groups = weights.groups();
  if (sharding.has_value() && sharding->initial == nullptr) {
    return absl::InvalidArgumentError("ZeRO-3 needs the initial f32 weights");
  }
  const DType compute_dtype = sharding.has_value() ? sharding->dtype
                              : groups.empty()     ? DType::kF32
                                                   : groups[0].flat.dtype();
  if (master_source == nullptr && compute_dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("ZeRO-2 over ", DTypeName(compute_dtype),
                                                   " weights needs separate f32 masters"));
  }
  if (master_source != nullptr && master_source->groups().size() != groups.size()) {
    return absl::InvalidArgumentError("ZeRO-2: the master weights have another layout");
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    const ParameterGroup& group = groups[g];
    const int64_t padded = group.padded;
    if (padded % n != 0) {
      return absl::InvalidArgumentError(absl::StrCat("parameter group ", group.name, " has ",
                                                     padded, " elements, not a multiple of ", n,
                                                     " ranks"));
    }
    const int64_t shard = padded / n;
    state->shard_.push_back(shard);
    for (auto [list, what] :
         {std::pair{&state->grad_, "gradient shard"}, std::pair{&state->m_, "AdamW exp_avg shard"},
          std::pair{&state->v_, "AdamW exp_avg_sq shard"}}) {
      ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(allocator, {shard}, DType::kF32,
                                               absl::StrCat(what, " ", group.name)));
      owner.Fill(t, 0.0f);
      list->push_back(std::move(t));
    }
    if (master_source != nullptr || offload) {
      const Tensor& source = master_source != nullptr ? master_source->groups()[g].flat
                             : sharding.has_value()   ? sharding->initial->groups()[g].flat
                                                      : group.flat;
      if (source.dtype() != DType::kF32 || source.numel() != padded) {
        return absl::InvalidArgumentError(
            absl::StrCat("ZeRO-2: master source group ", group.name, " is not f32[", padded, "]"));
      }
      ASSIGN_OR_RETURN(Tensor master,
                       Tensor::Empty(allocator, {shard}, DType::kF32,
                                     absl::StrCat("master weights shard ", group.name)));
      backend.Copy(source.Rows(comm.rank() * shard, (comm.rank() + 1) * shard), master);
      state->master_.push_back(std::move(master));
    }
  }
  state->open_.resize(groups.size());
  if (sharding.has_value()) {
    ASSIGN_OR_RETURN(state->sharded_,
                     ShardedWeights::Create(weights, *sharding->initial, sharding->dtype, comm,
                                            backend, state->executor_));
  }
  return state;
}

Tensor Zero2State::master_shard(int group) const {
  if (!master_.empty()) return master_[group];
  if (sharded_ != nullptr) return sharded_->shard(group);  // f32: the compute shard
  const int64_t begin = comm_.rank() * shard_[group];
  return weights_.groups()[group].flat.Rows(begin, begin + shard_[group]);
}

bool Zero2State::is_layer(int group) const {
  return group != weights_.embed_group() && group != weights_.final_group();
}

void Zero2State::ZeroGradients() {
  for (Tensor& g : grad_) owner().Fill(g, 0.0f);
}

absl::StatusOr<Zero2State::GroupBuffer> Zero2State::TakeBuffer(int group) {
  const ParameterGroup& layout = weights_.groups()[group];
  GroupBuffer buffer;
  if (is_layer(group)) {
    buffer.slot = next_slot_;
    next_slot_ = 1 - next_slot_;
    // The slot's previous reduce-scatter must be done before it is reused.
    RETURN_IF_ERROR(executor_.WaitFor(cache_ticket_[buffer.slot]));
    Tensor& cached = cache_[buffer.slot];
    if (!cached.defined()) {
      ASSIGN_OR_RETURN(cached, Tensor::Empty(backend_.allocator(), {layout.padded}, DType::kF32,
                                             "one-layer gradient cache"));
    }
    buffer.tensor = cached;
  } else {
    ASSIGN_OR_RETURN(buffer.tensor,
                     Tensor::Empty(backend_.allocator(), {layout.padded}, DType::kF32,
                                   absl::StrCat("gradient buffer ", layout.name)));
  }
  backend_.Fill(buffer.tensor, 0.0f);
  return buffer;
}

void Zero2State::QueueReduceScatter(int group, GroupBuffer buffer) {
  const int64_t shard = shard_[group];
  float* owned = grad_[group].data<float>();
  Tensor data = std::move(buffer.tensor);
  // The communicator adds the reduced chunk into the owned gradient shard
  // itself (on its stream on a GPU): gradients accumulate over passes. The
  // mark is taken here, on the compute thread, when the group's last
  // gradient has been issued: the collective then waits for that compute
  // only, not for the next layer's backward issued before the
  // communication thread reaches it.
  std::shared_ptr<const ComputeMark> ready = comm_.MarkCompute();
  const int64_t ticket = executor_.Submit([this, data, shard, owned, ready]() -> absl::Status {
    return comm_.ReduceScatterSum(data.data<float>(), shard, owned, ready.get());
  });
  if (buffer.slot >= 0) cache_ticket_[buffer.slot] = ticket;
}

absl::StatusOr<bool> Zero2State::AnyRankActive(bool active) {
  double flag = active ? 1.0 : 0.0;
  RETURN_IF_ERROR(executor_.Run([&] { return comm_.AllReduce(&flag, 1, ReduceOp::kMax); }));
  return flag > 0;
}

absl::Status Zero2State::BeginPass() { return AnyRankActive(true).status(); }

absl::Status Zero2State::Acquire(int group, ModelTensors& grads) {
  CHECK(!open_[group].has_value()) << "group " << group << " acquired twice";
  ASSIGN_OR_RETURN(GroupBuffer buffer, TakeBuffer(group));
  BindGroupTensors(weights_, group, buffer.tensor, grads);
  open_[group] = std::move(buffer);
  return absl::OkStatus();
}

absl::Status Zero2State::Release(int group) {
  CHECK(open_[group].has_value()) << "group " << group << " released without Acquire";
  GroupBuffer buffer = *std::move(open_[group]);
  open_[group].reset();
  QueueReduceScatter(group, std::move(buffer));
  return absl::OkStatus();
}

// The release order of a real pass: final, layers L-1 .. 0, embed.
absl::Status Zero2State::EmptyPass() {
  const int L = weights_.config().num_hidden_layers;
  std::vector<int> order = {weights_.final_group()};
  for (int l = L - 1; l >= 0; --l) order.push_back(weights_.layer_group(l));
  order.push_back(weights_.embed_group());
  for (int group : order) {
    ASSIGN_OR_RETURN(GroupBuffer buffer, TakeBuffer(group));
    QueueReduceScatter(group, std::move(buffer));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Zero2State::FinishBackward() {
  int empty_passes = 0;
  while (true) {
    ASSIGN_OR_RETURN(const bool others_active, AnyRankActive(false));
    if (!others_active) break;
    RETURN_IF_ERROR(EmptyPass());
    ++empty_passes;
  }
  RETURN_IF_ERROR(executor_.WaitAll());
  return empty_passes;
}

absl::StatusOr<double> Zero2State::GlobalGradNorm() {
  double sum = 0;
  for (const Tensor& g : grad_) sum += owner().SumSquares(g);
  // Void (not a divergence) when a sum found no device memory for its partials.
  RETURN_IF_ERROR(backend_.TakeDeferredError());
  RETURN_IF_ERROR(executor_.Run([&] { return comm_.AllReduce(&sum, 1, ReduceOp::kSum); }));
  return std::sqrt(sum);
}

absl::Status Zero2State::Step(AdamWParams params, double weight_decay) {
  const int rank = comm_.rank();
  auto& groups = weights_.groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const ParameterGroup& group = groups[g];
    const int64_t begin = rank * shard_[g], end = begin + shard_[g];
    const Tensor master = master_shard(static_cast<int>(g));
    // Each tensor's part inside [begin, end), with its own weight decay.
    int64_t offset = 0;
    for (size_t i = 0; i < group.specs.size(); ++i) {
      const int64_t n = NumElements(group.specs[i].shape);
      const int64_t a = std::max(offset, begin), b = std::min(offset + n, end);
      offset += n;
      if (a >= b) continue;
      params.weight_decay = WeightDecayFor(group.specs[i].kind, weight_decay);
      Tensor w = master.Rows(a - begin, b - begin);
      Tensor dw = grad_[g].Rows(a - begin, b - begin);
      Tensor m = m_[g].Rows(a - begin, b - begin);
      Tensor v = v_[g].Rows(a - begin, b - begin);
      owner().AdamW(w, dw, m, v, params);
    }
  }
  return PublishWeights();
}

absl::Status Zero2State::RefreshComputeWeights() { return PublishWeights(); }

absl::Status Zero2State::CastMasterIntoComputeShard(int group, Tensor& owned) {
  if (host_ == nullptr) {
    backend_.Cast(master_[group], owned);
    return absl::OkStatus();
  }
  // Host masters: rounded on the host, then copied into the device's shard.
  if (owned.dtype() == DType::kF32) {
    backend_.Copy(master_[group], owned);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Tensor staged, Tensor::Empty(host_->allocator(), owned.shape(), owned.dtype(),
                                                "compute shard staging"));
  host_->Cast(master_[group], staged);
  backend_.Copy(staged, owned);
  return absl::OkStatus();
}

absl::Status Zero2State::PublishWeights() {
  if (sharded_ != nullptr) {
    // ZeRO-3: each rank's compute shard is all that changes.
    for (size_t g = 0; g < shard_.size() && !master_.empty(); ++g) {
      RETURN_IF_ERROR(CastMasterIntoComputeShard(static_cast<int>(g), sharded_->shard(g)));
    }
    return sharded_->Invalidate();
  }
  const int rank = comm_.rank();
  auto& groups = weights_.groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    Tensor& flat = groups[g].flat;
    const int64_t shard = shard_[g];
    if (!master_.empty()) {
      Tensor owned = flat.Rows(rank * shard, (rank + 1) * shard);
      RETURN_IF_ERROR(CastMasterIntoComputeShard(static_cast<int>(g), owned));
    }
    void* data = flat.raw_data();
    const int64_t shard_bytes = shard * static_cast<int64_t>(DTypeSize(flat.dtype()));
    executor_.Submit([this, data, shard_bytes] { return comm_.AllGather(data, shard_bytes); });
  }
  return executor_.WaitAll();
}

}  // namespace sbp
