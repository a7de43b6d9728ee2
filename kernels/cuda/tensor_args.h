// Host-side checks of the CUDA backend's tensor arguments and their
// conversion to raw kernel arguments (kernel_args.h). A failed check is a bug
// in the caller and CHECK-fails with the tensor's description.
#pragma once

#include <cstdint>

#include "kernels/cuda/kernel_args.h"
#include "kernels/tensor.h"

namespace sbp::cuda {

// `t` is defined, contiguous and on `device`.
inline void CheckOn(const Tensor& t, Device device, const char* name) {
  CHECK(t.defined()) << name << " is undefined";
  CHECK(t.device() == device) << name << " must be on " << DeviceName(device) << ", got "
                              << t.DebugString();
  CHECK(t.is_contiguous()) << name << " must be contiguous, got " << t.DebugString();
}

// ... and holds floats (f32 or bf16).
inline void CheckFloat(const Tensor& t, Device device, const char* name) {
  CheckOn(t, device, name);
  CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16)
      << name << " must be f32 or bf16, got " << t.DebugString();
}

// ... and holds `dtype`.
inline void CheckDType(const Tensor& t, Device device, DType dtype, const char* name) {
  CheckOn(t, device, name);
  CHECK(t.dtype() == dtype) << name << " must be " << DTypeName(dtype) << ", got "
                            << t.DebugString();
}

inline void CheckShape(const Tensor& t, const Tensor& like, const char* name,
                       const char* like_name) {
  CHECK(t.shape() == like.shape()) << name << " " << t.DebugString() << " must have the shape of "
                                   << like_name << " " << like.DebugString();
}

inline ElemType ToElemType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ElemType::kF32;
    case DType::kBF16:
      return ElemType::kBF16;
    case DType::kI32:
      return ElemType::kI32;
  }
  return ElemType::kF32;
}

inline In AsIn(const Tensor& t) { return In{t.raw_data(), ToElemType(t.dtype())}; }
inline Out AsOut(const Tensor& t) { return Out{t.raw_data(), ToElemType(t.dtype())}; }

// Rows of a [..., cols] tensor.
inline int64_t RowsOf(const Tensor& t, int64_t cols) { return cols == 0 ? 0 : t.numel() / cols; }

}  // namespace sbp::cuda
