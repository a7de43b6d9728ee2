// Device kinds between the runtime's enum (kernels/dtype.h) and the
// protocol's: the one conversion the coordinator, the worker agent and the
// CLI share. Names come from DeviceKindName.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/dtype.h"
#include "streambp/v1/common.pb.h"

namespace sbp {

inline streambp::v1::DeviceKind DeviceKindToProto(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? streambp::v1::DEVICE_KIND_CUDA : streambp::v1::DEVICE_KIND_CPU;
}

// InvalidArgument naming `field` for DEVICE_KIND_UNSPECIFIED or unknown values.
inline absl::StatusOr<DeviceKind> DeviceKindFromProto(streambp::v1::DeviceKind kind,
                                                      absl::string_view field) {
  switch (kind) {
    case streambp::v1::DEVICE_KIND_CPU:
      return DeviceKind::kCpu;
    case streambp::v1::DEVICE_KIND_CUDA:
      return DeviceKind::kCuda;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be DEVICE_KIND_CPU or DEVICE_KIND_CUDA"));
  }
}

// "cpu", "cuda", or "?" for a value this build does not know (display only).
inline absl::string_view ProtoDeviceKindName(streambp::v1::DeviceKind kind) {
  const absl::StatusOr<DeviceKind> known = DeviceKindFromProto(kind, "device");
  return known.ok() ? DeviceKindName(*known) : "?";
}

}  // namespace sbp
