// Tensor: a typed view (shape, row-major strides, dtype, device) over memory
// owned by a Buffer, or over memory owned elsewhere (Wrap). Copying a Tensor
// copies the view, not the data. Row ranges along dim 0 are views: StreamBP
// chunks are Rows(begin, end) of whole-sequence tensors, never copies.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "common/check.h"
#include "kernels/allocator.h"
#include "kernels/dtype.h"

namespace sbp {

using Shape = std::vector<int64_t>;

int64_t NumElements(const Shape& shape);
std::string ShapeString(const Shape& shape);  // "[4, 64]"

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised tensor from `allocator`; `what` names it in out-of-memory errors.
  static absl::StatusOr<Tensor> Empty(Allocator& allocator, Shape shape, DType dtype,
                                      absl::string_view what = "tensor");
  // Zero-filled host tensor (device tensors are zeroed by their backend).
  static absl::StatusOr<Tensor> Zeros(Allocator& allocator, Shape shape, DType dtype,
                                      absl::string_view what = "tensor");
  // View of memory owned by the caller (mapped files, test arrays).
  static Tensor Wrap(void* data, Shape shape, DType dtype, Device device = Device::Cpu());

  bool defined() const { return data_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }  // in elements
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return NumElements(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_contiguous() const;

  void* raw_data() const { return data_; }
  template <typename T>
  T* data() const {
    CHECK(defined()) << "data() of an undefined tensor";
    CHECK(DTypeMatches<T>()) << "tensor is " << DTypeName(dtype_);
    return static_cast<T*>(data_);
  }

  // Rows [begin, end) along dim 0, a view.
  Tensor Rows(int64_t begin, int64_t end) const;
  // Same data, new shape (contiguous tensors only; one dim may be -1).
  Tensor Reshape(Shape shape) const;
  // [dim0, product of the rest].
  Tensor Flatten2D() const;

  // Shape + dtype + device equality.
  bool SameLayout(const Tensor& other) const;
  std::string DebugString() const;  // "f32[4, 64]@cpu"

  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

 private:
  template <typename T>
  bool DTypeMatches() const {
    if constexpr (std::is_same_v<T, float>) return dtype_ == DType::kF32;
    if constexpr (std::is_same_v<T, bf16_t>) return dtype_ == DType::kBF16;
    if constexpr (std::is_same_v<T, int32_t>) return dtype_ == DType::kI32;
    return false;
  }

  std::shared_ptr<Buffer> buffer_;
  void* data_ = nullptr;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::kF32;
  Device device_;
};

// Row-major strides for `shape`.
Shape ContiguousStrides(const Shape& shape);

}  // namespace sbp
