#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/op_checks.h"

namespace sbp::cpu {
namespace {

// SumSquares: blocks of at least kMinBlock elements, at most kMaxBlocks blocks.
constexpr int64_t kMinBlock = 1 << 14;
constexpr int64_t kMaxBlocks = 1024;

void CheckSameShape(const Tensor& a, const Tensor& b, const char* op, const char* a_name,
                    const char* b_name) {
  CHECK(a.shape() == b.shape()) << op << ": " << a_name << " " << a.DebugString()
                                << " must have the shape of " << b_name << " " << b.DebugString();
}

// Elements per block of SumSquares over n elements.
int64_t SumSquaresBlock(int64_t n) {
  return std::max(kMinBlock, (n + kMaxBlocks - 1) / kMaxBlocks);
}

// BlockSumSquares' accumulators combined, in its order.
double CombineLanes(const double* acc) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Sum of squares of x[begin, end) in double, eight independent accumulators
// (a fixed order, so the result does not depend on anything but the data).
template <typename Load>
double BlockSumSquares(int64_t begin, int64_t end, Load load) {
  double acc[8] = {};
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const double x = load(i + k);
      acc[k] += x * x;
    }
  }
  for (; i < end; ++i) {
    const double x = load(i);
    acc[0] += x * x;
  }
  return CombineLanes(acc);
}

template <typename Load>
double SumSquaresImpl(int64_t n, Load load) {
  if (n == 0) return 0.0;
  const int64_t block = SumSquaresBlock(n);
  const int64_t blocks = (n + block - 1) / block;
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    partial[b] = BlockSumSquares(b * block, std::min(n, (b + 1) * block), load);
  }
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}

}  // namespace

double SumSquares(const Tensor& x) {
  CheckHost(x, "x");
  if (x.dtype() == DType::kBF16) {
    const bf16_t* data = x.data<bf16_t>();
    return SumSquaresImpl(x.numel(), [data](int64_t i) { return Bf16ToFloat(data[i]); });
  }
  CHECK(x.dtype() == DType::kF32) << "SumSquares of " << x.DebugString()
                                  << ": only f32 and bf16 are supported";
  const float* data = x.data<float>();
  return SumSquaresImpl(x.numel(), [data](int64_t i) { return data[i]; });
}

double SumSquaresOfRows(int64_t rows, int64_t cols,
                        const std::vector<std::pair<int32_t, int32_t>>& nonzero,
                        const float* values) {
  const int64_t n = rows * cols;
  if (n == 0) return 0.0;
  // Each block as BlockSumSquares adds it: element i of [begin, end) into
  // accumulator (i - begin) % 8 up to the last whole group of 8, the rest
  // into accumulator 0, each accumulator in increasing i; visiting the rows
  // in ascending order keeps that order, and zero rows add nothing.
  const int64_t block = SumSquaresBlock(n);
  double sum = 0.0;
  size_t first = 0;  // the first row that may reach the current block
  for (int64_t begin = 0; begin < n; begin += block) {
    const int64_t end = std::min(n, begin + block);
    const int64_t whole = begin + (end - begin) / 8 * 8;
    double acc[8] = {};
    while (first < nonzero.size() && (nonzero[first].first + 1) * cols <= begin) ++first;
    for (size_t k = first; k < nonzero.size() && nonzero[k].first * cols < end; ++k) {
      const int64_t row_begin = nonzero[k].first * cols;
      const float* row = values + static_cast<int64_t>(nonzero[k].second) * cols;
      const int64_t lo = std::max(begin, row_begin), hi = std::min(end, row_begin + cols);
      for (int64_t i = lo; i < hi; ++i) {
        const double x = row[i - row_begin];
        acc[i < whole ? (i - begin) % 8 : 0] += x * x;
      }
    }
    sum += CombineLanes(acc);
  }
  return sum;
}

void Add(const Tensor& a, const Tensor& b, Tensor& out) {
  CheckHostF32(a, "a");
  CheckHostF32(b, "b");
  CheckHostF32(out, "out");
  CheckSameShape(b, a, "Add", "b", "a");
  CheckSameShape(out, a, "Add", "out", "a");
  const int64_t n = a.numel();
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  float* z = out.data<float>();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
}

void Axpy(float alpha, const Tensor& x, Tensor& y) {
  CheckHostF32(x, "x");
  CheckHostF32(y, "y");
  CheckSameShape(y, x, "Axpy", "y", "x");
  const int64_t n = x.numel();
  const float* xs = x.data<float>();
  float* ys = y.data<float>();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) ys[i] += alpha * xs[i];
}

void Scale(Tensor& x, float s) {
  CheckHostF32(x, "x");
  const int64_t n = x.numel();
  float* xs = x.data<float>();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) xs[i] *= s;
}

void Fill(Tensor& x, float value) {
  CheckHost(x, "x");
  const int64_t n = x.numel();
  switch (x.dtype()) {
    case DType::kF32:
      std::fill_n(x.data<float>(), n, value);
      return;
    case DType::kBF16:
      std::fill_n(x.data<bf16_t>(), n, FloatToBf16(value));
      return;
    case DType::kI32: {
      CHECK(std::trunc(value) == value && value >= -2147483648.0f && value < 2147483648.0f)
          << "Fill of " << x.DebugString() << " with " << value << ": not an int32 value";
      std::fill_n(x.data<int32_t>(), n, static_cast<int32_t>(value));
      return;
    }
  }
  CHECK(false) << "Fill of " << x.DebugString() << ": unknown dtype";
}

void Cast(const Tensor& src, Tensor& dst) {
  CheckHost(src, "src");
  CheckHost(dst, "dst");
  CheckSameShape(dst, src, "Cast", "dst", "src");
  const int64_t n = src.numel();
  if (src.dtype() == dst.dtype()) {
    if (src.raw_data() != dst.raw_data()) {
      std::memmove(dst.raw_data(), src.raw_data(), src.nbytes());
    }
    return;
  }
  if (src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16) {
    const float* s = src.data<float>();
    bf16_t* d = dst.data<bf16_t>();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
    for (int64_t i = 0; i < n; ++i) d[i] = FloatToBf16(s[i]);
    return;
  }
  if (src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32) {
    const bf16_t* s = src.data<bf16_t>();
    float* d = dst.data<float>();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
    for (int64_t i = 0; i < n; ++i) d[i] = Bf16ToFloat(s[i]);
    return;
  }
  CHECK(false) << "Cast from " << src.DebugString() << " to " << dst.DebugString()
               << ": only f32 <-> bf16 or equal dtypes are supported";
}

void Copy(const Tensor& src, Tensor& dst) {
  CheckHost(src, "src");
  CheckHost(dst, "dst");
  CheckSameShape(dst, src, "Copy", "dst", "src");
  CHECK(src.dtype() == dst.dtype()) << "Copy from " << src.DebugString() << " to "
                                    << dst.DebugString() << ": dtypes differ (use Cast)";
  if (src.raw_data() != dst.raw_data()) std::memmove(dst.raw_data(), src.raw_data(), src.nbytes());
}

}  // namespace sbp::cpu
