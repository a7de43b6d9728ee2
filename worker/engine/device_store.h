// Parameter stores on a backend's device. A device store has the layout and
// names of a host ParameterStore (same groups, offsets and padding), its
// flat buffers allocated on the device in a chosen dtype: the bf16 (or f32)
// compute copy of the weights, or f32 gradients. BindModelTensors works on
// it as on a host store; ParameterStore::Zero does not (it is host memory
// only): ZeroStore clears a store through the backend.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "worker/engine/parameter_store.h"

namespace sbp {

// dst <- src, where src is f32 (host or device memory) and dst a device
// tensor of the same size in f32 or bf16: a bf16 dst gets the f32 values
// staged on the device (an allocation named `what`), then rounded there.
absl::Status CopyRoundedInto(const Tensor& src, Backend& backend, Tensor& dst,
                             absl::string_view what);

// host f32 dst <- device src of the same size (f32, or bf16 widened on the
// device first).
absl::Status CopyWidenedToHost(const Tensor& src, Backend& backend, Tensor& dst);

// A device store holding `host`'s values rounded to `dtype` (f32 or bf16).
// A host backend gets a plain copy in f32.
absl::StatusOr<ParameterStore> CopyStoreToDevice(const ParameterStore& host, Backend& backend,
                                                 DType dtype, absl::string_view what);

// device <- host f32 (same layout; values rounded to the device store's
// dtype). Either side may be host memory on a host backend.
absl::Status CopyStoreInto(const ParameterStore& host, Backend& backend, ParameterStore& device);

// A zero-filled host f32 store with `like`'s layout (any device or dtype),
// from `host_allocator`: where checkpoints are read into.
absl::StatusOr<ParameterStore> HostStoreLike(const ParameterStore& like, Allocator& host_allocator,
                                             absl::string_view what);

// A zero-filled device store with `like`'s layout.
absl::StatusOr<ParameterStore> ZeroStoreOnDevice(const ParameterStore& like, Backend& backend,
                                                 DType dtype, absl::string_view what);

// Every element (padding included) set to zero, on whichever device holds it.
void ZeroStore(ParameterStore& store, Backend& backend);

// `store`'s values in host f32 memory, for writing: `store` itself (sharing
// its buffers) when it already is host f32, else a copy from `host_allocator`.
absl::StatusOr<ParameterStore> HostCopyOfStore(const ParameterStore& store, Backend& backend,
                                               Allocator& host_allocator, absl::string_view what);

// host <- device (same layout; values converted to the host store's f32).
absl::Status CopyStoreToHost(const ParameterStore& device, Backend& backend, ParameterStore& host);

}  // namespace sbp
