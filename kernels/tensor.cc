#include "kernels/tensor.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sbp {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
  }
  return "?";
}

std::string DeviceName(Device device) {
  return device.is_cpu() ? "cpu" : absl::StrCat("cuda:", device.index);
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

Shape ContiguousStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

absl::StatusOr<Tensor> Tensor::Empty(Allocator& allocator, Shape shape, DType dtype,
                                     absl::string_view what) {
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", ShapeString(shape), " of '", what, "'"));
    }
  }
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  auto buffer = allocator.Allocate(bytes, what);
  if (!buffer.ok()) return buffer.status();
  Tensor t;
  t.buffer_ = *std::move(buffer);
  t.data_ = t.buffer_->data();
  t.strides_ = ContiguousStrides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = allocator.device();
  return t;
}

absl::StatusOr<Tensor> Tensor::Zeros(Allocator& allocator, Shape shape, DType dtype,
                                     absl::string_view what) {
  auto t = Empty(allocator, std::move(shape), dtype, what);
  if (!t.ok()) return t.status();
  CHECK(t->device().is_cpu()) << "Tensor::Zeros is host-only; use the backend's Fill";
  std::memset(t->raw_data(), 0, t->nbytes());
  return t;
}

Tensor Tensor::Wrap(void* data, Shape shape, DType dtype, Device device) {
  Tensor t;
  t.data_ = data;
  t.strides_ = ContiguousStrides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

int64_t Tensor::dim(int i) const {
  if (i < 0) i += rank();
  CHECK(i >= 0 && i < rank()) << "dim " << i << " of " << DebugString();
  return shape_[i];
}

bool Tensor::is_contiguous() const { return strides_ == ContiguousStrides(shape_); }

Tensor Tensor::Rows(int64_t begin, int64_t end) const {
  CHECK_GE(rank(), 1);
  CHECK(0 <= begin && begin <= end && end <= shape_[0])
      << "rows [" << begin << ", " << end << ") of " << DebugString();
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + begin * strides_[0] * static_cast<int64_t>(DTypeSize(dtype_));
  return t;
}

Tensor Tensor::Reshape(Shape shape) const {
  CHECK(is_contiguous()) << "Reshape of a non-contiguous " << DebugString();
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (shape[i] == -1) {
      CHECK_EQ(infer, -1) << "more than one -1 in Reshape";
      infer = i;
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    CHECK(known > 0 && numel() % known == 0) << "cannot infer dim for " << DebugString();
    shape[infer] = numel() / known;
  }
  CHECK_EQ(NumElements(shape), numel()) << "Reshape " << DebugString() << " to " << ShapeString(shape);
  Tensor t = *this;
  t.strides_ = ContiguousStrides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::Flatten2D() const {
  CHECK_GE(rank(), 1);
  return Reshape({shape_[0], shape_[0] == 0 ? 0 : numel() / shape_[0]});
}

bool Tensor::SameLayout(const Tensor& other) const {
  return shape_ == other.shape_ && dtype_ == other.dtype_ && device_ == other.device_;
}

std::string Tensor::DebugString() const {
  return absl::StrCat(DTypeName(dtype_), ShapeString(shape_), "@", DeviceName(device_));
}

}  // namespace sbp
