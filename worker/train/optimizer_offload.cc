#include "worker/train/optimizer_offload.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "kernels/allocator.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/transfer_queue.h"
#include "worker/engine/device_store.h"
#include "worker/train/optimizer.h"

namespace sbp {
namespace {

using Ticket = TransferQueue::Ticket;

// Elements cast and uploaded per staging buffer when the compute copy is not
// f32 (bf16): 16 Mi elements, 32 MiB of bf16 per buffer.
constexpr int64_t kUploadChunkElements = int64_t{1} << 24;

class OffloadedOptimizerState final : public OptimizerState, public GradientSink {
 public:
  OffloadedOptimizerState(ParameterStore& weights, Backend& backend, bool separate_master)
      : weights_(weights),
        backend_(backend),
        host_allocator_(backend.host_allocator()),
        host_(host_allocator_),
        separate_master_(separate_master),
        queue_(backend.NewTransferQueue()) {}

  ~OffloadedOptimizerState() override { queue_->Drain().IgnoreError(); }

  // The host stores (masters from `initial`, zero moments) and the device's
  // gradient cache.
  absl::Status Init(const ParameterStore& initial, const TrainSpec& train) {
    ASSIGN_OR_RETURN(masters_,
                     HostStoreLike(weights_, host_allocator_, "offloaded master weights"));
    RETURN_IF_ERROR(CopyStoreInto(initial, backend_, masters_));
    backend_.Synchronize();
    ASSIGN_OR_RETURN(grads_, HostStoreLike(weights_, host_allocator_, "offloaded gradients"));
    // The moments come from host_'s allocator: host memory.
    ASSIGN_OR_RETURN(AdamWOptimizer optimizer, AdamWOptimizer::Create(weights_, host_, train));
    optimizer_.emplace(std::move(optimizer));

    const auto& groups = weights_.groups();
    int64_t largest_layer = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      if (is_layer(static_cast<int>(g))) {
        largest_layer = std::max(largest_layer, groups[g].flat.numel());
      }
    }
    for (Tensor& slot : cache_) {
      ASSIGN_OR_RETURN(slot, Tensor::Empty(backend_.allocator(), {largest_layer}, DType::kF32,
                                           "one-layer gradient cache"));
    }
    if (!groups.empty() && groups[0].flat.dtype() != DType::kF32) {
      int64_t largest = 0;
      for (const ParameterGroup& group : groups) largest = std::max(largest, group.flat.numel());
      for (Tensor& staging : staging_) {
        ASSIGN_OR_RETURN(staging,
                         Tensor::Empty(host_allocator_, {std::min(largest, kUploadChunkElements)},
                                       groups[0].flat.dtype(), "compute-copy staging"));
      }
    }
    open_.resize(groups.size());
    written_.assign(groups.size(), false);
    bound_.layers.resize(weights_.config().num_hidden_layers);
    return absl::OkStatus();
  }

  // ---- OptimizerState -------------------------------------------------------
  ModelTensors& grads() override { return bound_; }

  void ZeroGradients() override {
    // A step that ended early may have left copies queued and groups open.
    queue_->Drain().IgnoreError();  // a broken queue reports at the next wait
    for (auto& open : open_) open.reset();
    released_.clear();
    prefetch_ = Prefetch();
    // The host groups are overwritten by the step's first download of each
    // group; FinishBackward zeroes those no pass wrote.
    std::fill(written_.begin(), written_.end(), false);
  }

  absl::Status FinishBackward() override {
    RETURN_IF_ERROR(queue_->Drain());
    released_.clear();
    for (size_t g = 0; g < written_.size(); ++g) {
      if (written_[g]) continue;
      host_.Fill(grads_.groups()[g].flat, 0.0f);
      written_[g] = true;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> GlobalGradNorm() override {
    RETURN_IF_ERROR(FinishBackward());
    // The on-device sum's order: group by group, each over its used elements.
    return AdamWOptimizer::GlobalGradNorm(host_, grads_);
  }

  absl::Status Update(double lr, int64_t step, float grad_scale) override {
    RETURN_IF_ERROR(FinishBackward());
    optimizer_->Step(masters_, grads_, lr, step, grad_scale);
    return UploadComputeCopy();
  }

  absl::Status Save(const CheckpointSink& sink, const TrainerState& state,
                    int64_t keep_last) override {
    if (!separate_master_) {
      // f32 compute weights equal the masters bit for bit.
      return SaveCheckpoint(sink, masters_, nullptr, optimizer_->exp_avg(),
                            optimizer_->exp_avg_sq(), state, keep_last);
    }
    CpuAllocator host;
    ASSIGN_OR_RETURN(const ParameterStore w,
                     HostCopyOfStore(weights_, backend_, host, "checkpoint weights"));
    return SaveCheckpoint(sink, w, &masters_, optimizer_->exp_avg(), optimizer_->exp_avg_sq(),
                          state, keep_last);
  }

  // Reads straight into the host stores (no second copy of the state); a
  // failed load leaves them partly written, and the run does not go on.
  absl::StatusOr<TrainerState> Load(const std::string& dir) override {
    RETURN_IF_ERROR(queue_->Drain());
    ASSIGN_OR_RETURN(TrainerState state, LoadCheckpoint(dir, masters_, optimizer_->exp_avg(),
                                                        optimizer_->exp_avg_sq()));
    RETURN_IF_ERROR(UploadComputeCopy());
    return state;
  }

  bool separate_master() const override { return separate_master_; }
  int64_t offload_copied_bytes() const override { return queue_->copied_bytes(); }
  double offload_busy_seconds() const override { return queue_->busy_seconds(); }
  double offload_wait_seconds() const override { return queue_->wait_seconds(); }
  int64_t host_current_bytes() const override { return host_allocator_.current_bytes(); }
  int64_t host_peak_bytes() const override { return host_allocator_.peak_bytes(); }

  // ---- GradientSink -----------------------------------------------------------
  absl::Status BeginPass() override { return FreeReleasedBuffers(); }

  absl::Status Acquire(int group, ModelTensors& grads) override {
    CHECK(!open_[group].has_value()) << "group " << group << " acquired twice";
    const int64_t n = weights_.groups()[group].flat.numel();
    Open buffer;
    if (is_layer(group)) {
      if (prefetch_.group == group) {
        // Its sum so far was queued for upload when the layer above was acquired.
        buffer.slot = prefetch_.slot;
        buffer.tensor = cache_[buffer.slot].Rows(0, n);
        RETURN_IF_ERROR(queue_->WaitInCompute(prefetch_.ticket));
        prefetch_ = Prefetch();
      } else {
        buffer.slot = next_slot_;
        buffer.tensor = cache_[buffer.slot].Rows(0, n);
        // The slot's previous download must land before it is overwritten.
        RETURN_IF_ERROR(queue_->WaitInCompute(slot_ticket_[buffer.slot]));
        RETURN_IF_ERROR(Start(group, buffer.tensor));
      }
      next_slot_ = 1 - buffer.slot;
      PrefetchLayerBelow(group);
    } else {
      ASSIGN_OR_RETURN(buffer.tensor, Tensor::Empty(backend_.allocator(), {n}, DType::kF32,
                                                    absl::StrCat("gradient buffer ",
                                                                 weights_.groups()[group].name)));
      RETURN_IF_ERROR(Start(group, buffer.tensor));
    }
    BindGroupTensors(weights_, group, buffer.tensor, grads);
    open_[group] = std::move(buffer);
    return absl::OkStatus();
  }

  absl::Status Release(int group) override {
    CHECK(open_[group].has_value()) << "group " << group << " released without Acquire";
    Open buffer = *std::move(open_[group]);
    open_[group].reset();
    // An embed or final buffer released earlier (whose download had this
    // layer's backward to run in) is freed here.
    if (is_layer(group)) RETURN_IF_ERROR(FreeReleasedBuffers());
    // host group = device buffer (the sum of every pass so far).
    Ticket ticket = 0;
    if (buffer.tensor.numel() > 0) {
      ticket = queue_->Copy(buffer.tensor, grads_.groups()[group].flat);
    }
    written_[group] = true;
    if (buffer.slot >= 0) {
      slot_ticket_[buffer.slot] = ticket;
    } else {
      released_.push_back({ticket, std::move(buffer.tensor)});
    }
    return absl::OkStatus();
  }

 private:
  struct Open {
    Tensor tensor;
    int slot = -1;  // cache slot (layers), -1 for a buffer of its own
  };
  // An upload of a layer's partial sum into a cache slot, queued one layer
  // ahead.
  struct Prefetch {
    int group = -1;
    int slot = -1;
    Ticket ticket = 0;
  };

  bool is_layer(int group) const {
    return group != weights_.embed_group() && group != weights_.final_group();
  }

  // Frees the embed and final buffers whose downloads were queued, once
  // those are done: at the next layer's Release, the next pass's BeginPass
  // or FinishBackward, so that their lifetime (and the device's peak) does
  // not depend on when the queue's thread ran.
  absl::Status FreeReleasedBuffers() {
    if (released_.empty()) return absl::OkStatus();
    RETURN_IF_ERROR(queue_->WaitOnHost(released_.back().first));
    released_.clear();  // the queue held its references until the copies were done
    return absl::OkStatus();
  }

  // The step's sum so far into `buffer`: zero in the step's first pass over
  // `group`, else the host's partial sum (an upload the compute waits for).
  absl::Status Start(int group, Tensor& buffer) {
    if (!written_[group]) {
      backend_.Fill(buffer, 0.0f);
      return absl::OkStatus();
    }
    if (buffer.numel() == 0) return absl::OkStatus();
    return queue_->WaitInCompute(queue_->Copy(grads_.groups()[group].flat, buffer));
  }

  // In a later pass, queues the upload of the next layer's (group - 1) sum
  // into the other slot, behind that slot's download (the queue is ordered).
  void PrefetchLayerBelow(int group) {
    const int below = group - 1;
    if (!is_layer(below) || !written_[below] || open_[below].has_value()) return;
    const Tensor& host = grads_.groups()[below].flat;
    if (host.numel() == 0) return;
    const int slot = next_slot_;
    const Ticket ticket = queue_->Copy(host, cache_[slot].Rows(0, host.numel()));
    slot_ticket_[slot] = ticket;
    prefetch_ = {below, slot, ticket};
  }

  // The compute copy from the masters, group by group through the queue: the
  // masters themselves (f32), or host casts in chunks through two staging
  // buffers (a buffer is refilled once its previous upload has left).
  absl::Status UploadComputeCopy() {
    auto& groups = weights_.groups();
    int next_staging = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      const Tensor& master = masters_.groups()[g].flat;
      const Tensor& compute = groups[g].flat;
      if (compute.numel() == 0) continue;
      if (compute.dtype() == DType::kF32) {
        queue_->Copy(master, compute);
        continue;
      }
      for (int64_t a = 0; a < compute.numel(); a += kUploadChunkElements) {
        const int64_t b = std::min(compute.numel(), a + kUploadChunkElements);
        const int s = next_staging;
        next_staging = 1 - next_staging;
        RETURN_IF_ERROR(queue_->WaitOnHost(staging_ticket_[s]));
        Tensor staged = staging_[s].Rows(0, b - a);
        host_.Cast(master.Rows(a, b), staged);
        staging_ticket_[s] = queue_->Copy(staged, compute.Rows(a, b));
      }
    }
    return queue_->WaitInCompute(queue_->last_ticket());
  }

  ParameterStore& weights_;  // the compute copy, on the device
  Backend& backend_;
  Allocator& host_allocator_;
  CpuBackend host_;  // the CPU's ops on host memory
  const bool separate_master_;
  ParameterStore masters_;                   // host f32
  ParameterStore grads_;                     // host f32: the step's gradient sum
  std::optional<AdamWOptimizer> optimizer_;  // moments on the host
  ModelTensors bound_;                       // views bound by Acquire
  std::vector<std::optional<Open>> open_;
  std::vector<bool> written_;       // the host group holds this step's sum so far
  Tensor cache_[2];                 // the one-layer cache (device)
  Ticket slot_ticket_[2] = {0, 0};  // the last copy queued on each slot
  int next_slot_ = 0;
  Prefetch prefetch_;
  std::vector<std::pair<Ticket, Tensor>> released_;  // embed/final buffers being downloaded
  Tensor staging_[2];  // host, compute dtype (non-f32 compute copies only)
  Ticket staging_ticket_[2] = {0, 0};
  std::unique_ptr<TransferQueue> queue_;  // last: destroyed (drained) first
};

}  // namespace

absl::StatusOr<std::unique_ptr<OptimizerState>> CreateOffloadedOptimizerState(
    const OptimizerStateOptions& options, Backend& backend, const TrainSpec& train,
    Engine& engine) {
  CHECK(options.weights != nullptr && options.initial != nullptr);
  if (options.comm != nullptr) {
    return absl::InvalidArgumentError(
        "CreateOffloadedOptimizerState is for one worker; ZeRO-2 offloads its shards itself");
  }
  auto state =
      std::make_unique<OffloadedOptimizerState>(*options.weights, backend, options.separate_master);
  RETURN_IF_ERROR(state->Init(*options.initial, train));
  engine.set_gradient_sink(state.get());
  return std::unique_ptr<OptimizerState>(std::move(state));
}

}  // namespace sbp
