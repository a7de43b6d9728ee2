// Argument checks and tuning constants shared by the CPU ops. A failed check
// is a bug in the caller (shapes come from our own engine), so it CHECKs.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace sbp::cpu {

// Below this many elements an op runs on one thread: forking a parallel
// region costs more than it saves.
inline constexpr int64_t kParallelMinElements = 1 << 15;

// `t` is defined, on the CPU and contiguous.
inline void CheckHost(const Tensor& t, const char* name) {
  CHECK(t.defined()) << name << " is undefined";
  CHECK(t.device().is_cpu()) << name << " must be on the cpu, got " << t.DebugString();
  CHECK(t.is_contiguous()) << name << " must be contiguous, got " << t.DebugString();
}

// ... and holds `dtype`.
inline void CheckHost(const Tensor& t, DType dtype, const char* name) {
  CheckHost(t, name);
  CHECK(t.dtype() == dtype) << name << " must be " << DTypeName(dtype) << ", got "
                            << t.DebugString();
}

inline void CheckHostF32(const Tensor& t, const char* name) { CheckHost(t, DType::kF32, name); }

// ... f32, with the shape of `like` (named `like_name` in the message).
inline void CheckHostLike(const Tensor& t, const Tensor& like, const char* name,
                          const char* like_name) {
  CheckHostF32(t, name);
  CHECK(t.shape() == like.shape())
      << name << " " << t.DebugString() << " must match " << like_name << " " << like.DebugString();
}

}  // namespace sbp::cpu
