// Element types and devices of tensors, and fp32 <-> bf16 conversion.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace sbp {

enum class DType : uint8_t { kF32, kBF16, kI32 };

inline size_t DTypeSize(DType dtype) { return dtype == DType::kBF16 ? 2 : 4; }
absl::string_view DTypeName(DType dtype);  // "f32", "bf16", "i32"

enum class DeviceKind : uint8_t { kCpu, kCuda };

// The one spelling of a device kind, shared by job specs, the store, the
// protocol conversions, the agent and the CLI: "cpu", "cuda".
inline absl::string_view DeviceKindName(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? "cuda" : "cpu";
}
inline std::optional<DeviceKind> DeviceKindFromName(absl::string_view name) {
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda") return DeviceKind::kCuda;
  return std::nullopt;
}

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  static Device Cpu() { return {DeviceKind::kCpu, 0}; }
  static Device Cuda(int index) { return {DeviceKind::kCuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool operator==(const Device&) const = default;
};
std::string DeviceName(Device device);  // "cpu", "cuda:0"

// bf16 is the top half of an IEEE fp32. Conversion rounds to nearest even and
// keeps NaNs quiet.
using bf16_t = uint16_t;

inline bf16_t FloatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<bf16_t>(bits >> 16);
}

inline float Bf16ToFloat(bf16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

}  // namespace sbp
