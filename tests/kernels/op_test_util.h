// Shared helpers of the CPU op tests: tensor makers, double-precision copies,
// normwise errors and central finite differences of a scalar function.
//
// The pattern of a backward test: a naive double-precision reference of the
// forward gives a scalar loss L(x) = sum_i r_i * f(x)_i for a random
// cotangent r; NumericGradient differentiates it by central differences in
// double; the fp32 analytic backward, run with dy = r, must match it to a
// normwise relative error that fits fp32 (about 1e-4).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "common/check.h"
#include "kernels/allocator.h"
#include "kernels/dtype.h"
#include "kernels/random.h"
#include "kernels/tensor.h"

namespace sbp::op_test {

using Vec = std::vector<double>;

inline Allocator& TestAllocator() {
  static CpuAllocator* allocator = new CpuAllocator();
  return *allocator;
}

// Zero-filled host tensor.
inline Tensor NewTensor(const Shape& shape, DType dtype = DType::kF32) {
  auto t = Tensor::Zeros(TestAllocator(), shape, dtype, "test tensor");
  CHECK_OK(t.status());
  return *std::move(t);
}

// f32 (or bf16) tensor with N(0, std^2) entries.
inline Tensor RandomTensor(const Shape& shape, uint64_t seed, float std = 1.0f,
                           DType dtype = DType::kF32) {
  Tensor t = NewTensor(shape, dtype);
  FillNormal(t, seed, 0.0f, std);
  return t;
}

// i32 tensor with entries in [low, high).
inline Tensor RandomInts(const Shape& shape, uint64_t seed, int32_t low, int32_t high) {
  Tensor t = NewTensor(shape, DType::kI32);
  FillIntegers(t, seed, low, high);
  return t;
}

inline Tensor FromValues(const Shape& shape, const std::vector<float>& values) {
  Tensor t = NewTensor(shape);
  CHECK_EQ(t.numel(), static_cast<int64_t>(values.size()));
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

inline Tensor FromInts(const Shape& shape, const std::vector<int32_t>& values) {
  Tensor t = NewTensor(shape, DType::kI32);
  CHECK_EQ(t.numel(), static_cast<int64_t>(values.size()));
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

// Sets every element of an f32 tensor (NaN marks memory that must be overwritten).
inline void FillWith(Tensor& t, float value) { std::fill_n(t.data<float>(), t.numel(), value); }

// A new tensor with the same layout and contents.
inline Tensor Clone(const Tensor& src) {
  Tensor t = NewTensor(src.shape(), src.dtype());
  std::memcpy(t.raw_data(), src.raw_data(), src.nbytes());
  return t;
}

// Contents of an f32 or bf16 tensor in double.
inline Vec ToDouble(const Tensor& t) {
  Vec out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kBF16) {
    const bf16_t* data = t.data<bf16_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = Bf16ToFloat(data[i]);
  } else {
    const float* data = t.data<float>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = data[i];
  }
  return out;
}

inline bool BitwiseEqual(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// ||got - want|| / max(||want||, 1e-30), in double.
inline double RelErr(const Vec& got, const Vec& want) {
  CHECK_EQ(got.size(), want.size());
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    ref += want[i] * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

inline double RelErr(const Tensor& got, const Vec& want) { return RelErr(ToDouble(got), want); }

inline Vec Sub(const Vec& a, const Vec& b) {
  CHECK_EQ(a.size(), b.size());
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] - b[i];
  return out;
}

inline Vec AddVec(const Vec& a, const Vec& b) {
  CHECK_EQ(a.size(), b.size());
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

inline double Dot(const Vec& a, const Vec& b) {
  CHECK_EQ(a.size(), b.size());
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences (f(x + h e_i) - f(x - h e_i)) / 2h of a scalar function
// evaluated in double; the step is relative to |x_i| (at least h).
inline Vec NumericGradient(const std::function<double(const Vec&)>& f, Vec x, double h = 1e-5) {
  Vec grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    const double step = h * std::max(1.0, std::abs(xi));
    x[i] = xi + step;
    const double plus = f(x);
    x[i] = xi - step;
    const double minus = f(x);
    x[i] = xi;
    grad[i] = (plus - minus) / (2.0 * step);
  }
  return grad;
}

// Tolerance of an fp32 analytic gradient against a double finite difference.
inline constexpr double kGradTol = 1e-4;
// Tolerance of an fp32 forward against a naive double reference.
inline constexpr double kForwardTol = 1e-5;

}  // namespace sbp::op_test
