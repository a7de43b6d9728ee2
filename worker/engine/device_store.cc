#include "worker/engine/device_store.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sbp {
namespace {

// A copy of `like` (which may be layout-only) whose groups are new buffers
// of `dtype` from `allocator` (contents uninitialised), with every view at
// the same offset.
absl::StatusOr<ParameterStore> Reallocate(const ParameterStore& like, Allocator& allocator,
                                          DType dtype, absl::string_view what) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter stores hold f32 or bf16, not ", DTypeName(dtype)));
  }
  ParameterStore out = like;
  for (ParameterGroup& group : out.groups()) {
    ASSIGN_OR_RETURN(Tensor flat, Tensor::Empty(allocator, {group.padded}, dtype,
                                                absl::StrCat(what, " ", group.name)));
    group.Attach(std::move(flat));
  }
  return out;
}

}  // namespace

absl::StatusOr<ParameterStore> CopyStoreToDevice(const ParameterStore& host, Backend& backend,
                                                 DType dtype, absl::string_view what) {
  ASSIGN_OR_RETURN(ParameterStore out, Reallocate(host, backend.allocator(), dtype, what));
  RETURN_IF_ERROR(CopyStoreInto(host, backend, out));
  return out;
}

absl::Status CopyStoreInto(const ParameterStore& host, Backend& backend, ParameterStore& device) {
  if (host.groups().size() != device.groups().size()) {
    return absl::InvalidArgumentError("CopyStoreInto: the stores have different layouts");
  }
  for (size_t g = 0; g < device.groups().size(); ++g) {
    const Tensor& src = host.groups()[g].flat;
    Tensor& dst = device.groups()[g].flat;
    if (src.numel() != dst.numel()) {
      return absl::InvalidArgumentError(absl::StrCat("CopyStoreInto: group ", host.groups()[g].name,
                                                     " is ", src.DebugString(), " and ",
                                                     dst.DebugString()));
    }
    RETURN_IF_ERROR(
        CopyRoundedInto(src, backend, dst, absl::StrCat(host.groups()[g].name, " staging")));
  }
  return absl::OkStatus();
}

absl::Status CopyRoundedInto(const Tensor& src, Backend& backend, Tensor& dst,
                             absl::string_view what) {
  if (src.dtype() == dst.dtype()) {
    backend.Copy(src, dst);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Tensor staged,
                   Tensor::Empty(backend.allocator(), src.shape(), src.dtype(), std::string(what)));
  backend.Copy(src, staged);
  backend.Cast(staged, dst);
  backend.Synchronize();  // before the staging buffer is released
  return absl::OkStatus();
}

absl::Status CopyWidenedToHost(const Tensor& src, Backend& backend, Tensor& dst) {
  if (src.dtype() == dst.dtype()) {
    backend.Copy(src, dst);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Tensor staged, Tensor::Empty(backend.allocator(), src.shape(), dst.dtype(),
                                                "gradient staging"));
  backend.Cast(src, staged);
  backend.Copy(staged, dst);
  return absl::OkStatus();
}

absl::StatusOr<ParameterStore> HostStoreLike(const ParameterStore& like, Allocator& host_allocator,
                                             absl::string_view what) {
  ASSIGN_OR_RETURN(ParameterStore out, Reallocate(like, host_allocator, DType::kF32, what));
  out.Zero();
  return out;
}

absl::StatusOr<ParameterStore> ZeroStoreOnDevice(const ParameterStore& like, Backend& backend,
                                                 DType dtype, absl::string_view what) {
  ASSIGN_OR_RETURN(ParameterStore out, Reallocate(like, backend.allocator(), dtype, what));
  ZeroStore(out, backend);
  return out;
}

void ZeroStore(ParameterStore& store, Backend& backend) {
  for (ParameterGroup& group : store.groups()) {
    if (group.flat.defined()) backend.Fill(group.flat, 0.0f);  // a detached group has none
  }
}

absl::StatusOr<ParameterStore> HostCopyOfStore(const ParameterStore& store, Backend& backend,
                                               Allocator& host_allocator, absl::string_view what) {
  const bool host_f32 = store.groups().empty() || (store.groups()[0].flat.device().is_cpu() &&
                                                   store.groups()[0].flat.dtype() == DType::kF32);
  if (host_f32) return store;
  ASSIGN_OR_RETURN(ParameterStore host, Reallocate(store, host_allocator, DType::kF32, what));
  RETURN_IF_ERROR(CopyStoreToHost(store, backend, host));
  return host;
}

absl::Status CopyStoreToHost(const ParameterStore& device, Backend& backend, ParameterStore& host) {
  if (device.groups().size() != host.groups().size()) {
    return absl::InvalidArgumentError("CopyStoreToHost: the stores have different layouts");
  }
  for (size_t g = 0; g < host.groups().size(); ++g) {
    const Tensor& src = device.groups()[g].flat;
    Tensor& dst = host.groups()[g].flat;
    if (src.shape() != dst.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("CopyStoreToHost: group ", host.groups()[g].name, " is ", src.DebugString(),
                       " on the device and ", dst.DebugString(), " on the host"));
    }
    RETURN_IF_ERROR(CopyWidenedToHost(src, backend, dst));
  }
  return absl::OkStatus();
}

}  // namespace sbp
