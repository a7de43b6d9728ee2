// The layer inputs a training pass keeps for its backward (hidden[l] is the
// input of layer l, hidden[L] the final hidden state), wherever they live.
//
// Device tier (no store): L + 1 device tensors; hidden[l] is freed after
// layer l's backward (l > 0).
//
// Host or disk tier (a CheckpointStore): two device slots, hidden[l] in slot
// l % 2. The forward stores hidden[l] (l <= L - 2) while layer l computes,
// and layer l writes hidden[l + 1] into the other slot once hidden[l - 1]
// has left it. hidden[L - 1] and hidden[L] never leave the device. The
// backward of layer l first waits for hidden[l], then fetches hidden[l - 1]
// into the other slot (whose hidden[l + 1] is no longer read) while layer l's
// chunks run. The device thus holds two inputs whatever L is; the compute
// waits only where a copy is slower than a layer.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/engine/offload/checkpoint_store.h"

namespace sbp {

class LayerInputs {
 public:
  // `store` null: the device tier. `layers` = L; each input is [tokens, hidden].
  static absl::StatusOr<LayerInputs> Create(Backend& backend, CheckpointStore* store, int layers,
                                            int64_t tokens, int64_t hidden);
  LayerInputs(LayerInputs&&) = default;
  LayerInputs& operator=(LayerInputs&&) = delete;
  ~LayerInputs();  // waits for the store's copies before the slots go

  // Where hidden[l] is (or will be written): valid for l in [0, L].
  const Tensor& at(int l) const;

  // Before layer l's forward, with hidden[l] complete.
  absl::Status BeforeLayerForward(int l);
  // After the LM head has read hidden[L].
  void AfterHead();
  // Before layer l's backward, and after it.
  absl::Status BeforeLayerBackward(int l);
  void AfterLayerBackward(int l);

 private:
  LayerInputs(Backend& backend, CheckpointStore* store, int layers)
      : backend_(&backend), store_(store), layers_(layers) {}

  Backend* backend_;
  CheckpointStore* store_;
  int layers_;
  std::vector<Tensor> hidden_;                // device tier: L + 1; offloaded: the two slots
  TransferQueue::Ticket stored_[2] = {0, 0};  // the store of each slot's input
  TransferQueue::Ticket fetched_ = 0;         // the fetch of the next backward's input
};

}  // namespace sbp
