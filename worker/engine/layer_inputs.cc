#include "worker/engine/layer_inputs.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sbp {

absl::StatusOr<LayerInputs> LayerInputs::Create(Backend& backend, CheckpointStore* store,
                                                int layers, int64_t tokens, int64_t hidden) {
  LayerInputs inputs(backend, store, layers);
  const DType dtype = backend.activation_dtype();
  if (store == nullptr) {
    for (int l = 0; l <= layers; ++l) {
      ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(backend.allocator(), {tokens, hidden}, dtype,
                                               absl::StrCat("layer ", l, " input")));
      inputs.hidden_.push_back(std::move(t));
    }
    return inputs;
  }
  for (int k = 0; k < 2; ++k) {
    ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(backend.allocator(), {tokens, hidden}, dtype,
                                             absl::StrCat("layer input slot ", k)));
    inputs.hidden_.push_back(std::move(t));
  }
  RETURN_IF_ERROR(store->Reserve(std::max(layers - 1, 0), inputs.hidden_[0]));
  return inputs;
}

LayerInputs::~LayerInputs() {
  // A pass that ended early may leave copies reading or writing the slots.
  if (store_ != nullptr && !hidden_.empty()) (void)store_->queue().Drain();
}

const Tensor& LayerInputs::at(int l) const {
  CHECK(l >= 0 && l <= layers_) << "layer input " << l;
  return store_ == nullptr ? hidden_[l] : hidden_[l % 2];
}

absl::Status LayerInputs::BeforeLayerForward(int l) {
  if (store_ == nullptr) return absl::OkStatus();
  if (l <= layers_ - 2) stored_[l % 2] = store_->Put(l, hidden_[l % 2]);
  // The output slot held hidden[l - 1]: its copy must have left it.
  const int out = (l + 1) % 2;
  RETURN_IF_ERROR(store_->queue().WaitInCompute(stored_[out]));
  stored_[out] = 0;
  return absl::OkStatus();
}

void LayerInputs::AfterHead() {
  if (store_ == nullptr) hidden_[layers_] = Tensor();
}

absl::Status LayerInputs::BeforeLayerBackward(int l) {
  if (store_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(store_->queue().WaitInCompute(fetched_));
  fetched_ = 0;
  // The other slot's hidden[l + 1] (or hidden[L]) has been read by the ops
  // already issued, which the fetch is ordered after.
  if (l >= 1) fetched_ = store_->Get(l - 1, hidden_[(l - 1) % 2]);
  return absl::OkStatus();
}

void LayerInputs::AfterLayerBackward(int l) {
  if (store_ == nullptr) {
    if (l > 0) hidden_[l] = Tensor();
    return;
  }
  if (l == 0) {
    // Nothing is in flight: every store was waited for by a fetch.
    hidden_[0] = Tensor();
    hidden_[1] = Tensor();
  }
}

}  // namespace sbp
