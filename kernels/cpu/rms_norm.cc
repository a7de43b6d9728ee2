#include "kernels/cpu/rms_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/op_checks.h"

namespace sbp::cpu {
namespace {

// The backward reduces dweight over at most this many row blocks. Depends on
// the shape only, never on the thread count, so results are reproducible.
constexpr int64_t kMaxRowBlocks = 64;
constexpr int64_t kMinRowsPerBlock = 16;

// Returns the number of rows of x normalised by weight.
int64_t CheckRows(const Tensor& x, const Tensor& weight, const char* x_name) {
  CheckHostF32(x, x_name);
  CheckHostF32(weight, "weight");
  const int64_t d = weight.numel();
  CHECK(d > 0 && x.rank() >= 1 && x.dim(-1) == d)
      << x_name << " " << x.DebugString() << " must have last dim weight.numel() of "
      << weight.DebugString();
  return x.numel() / d;
}

void CheckSame(const Tensor& a, const Tensor& b, const char* a_name, const char* b_name) {
  CheckHostF32(a, a_name);
  CHECK(a.shape() == b.shape()) << a_name << " " << a.DebugString() << " must match " << b_name
                                << " " << b.DebugString();
}

// sum_j a_j * b_j in double with kLanes independent accumulators (a fixed
// order, so results depend on the data only), which lets the compiler keep
// several additions in flight and vectorise.
constexpr int kLanes = 8;

double DotDouble(const float* a, const float* b, int64_t n) {
  double acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) acc[k] += static_cast<double>(a[j + k]) * b[j + k];
  }
  for (; j < n; ++j) acc[0] += static_cast<double>(a[j]) * b[j];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

void RmsNormForward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor* rstd) {
  const int64_t rows = CheckRows(x, weight, "x");
  CheckSame(y, x, "y", "x");
  float* rstd_data = nullptr;
  if (rstd != nullptr) {
    CheckHostF32(*rstd, "rstd");
    CHECK_EQ(rstd->numel(), rows) << "rstd " << rstd->DebugString() << " for x " << x.DebugString()
                                  << " normalised over " << weight.DebugString();
    rstd_data = rstd->data<float>();
  }
  const int64_t d = weight.numel();
  const float* xs = x.data<float>();
  const float* w = weight.data<float>();
  float* ys = y.data<float>();
#pragma omp parallel for schedule(static) if (rows * d >= kParallelMinElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xs + r * d;
    float* yr = ys + r * d;
    const double sum = DotDouble(xr, xr, d);
    const float s = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(d) + eps));
    for (int64_t j = 0; j < d; ++j) yr[j] = (xr[j] * s) * w[j];
    if (rstd_data != nullptr) rstd_data[r] = s;
  }
}

void RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                     Tensor& dx, Tensor& dweight) {
  const int64_t rows = CheckRows(x, weight, "x");
  CheckSame(dy, x, "dy", "x");
  CheckSame(dx, x, "dx", "x");
  CheckSame(dweight, weight, "dweight", "weight");
  CheckHostF32(rstd, "rstd");
  CHECK_EQ(rstd.numel(), rows) << "rstd " << rstd.DebugString() << " for x " << x.DebugString();
  const int64_t d = weight.numel();
  if (rows == 0) return;
  const float* xs = x.data<float>();
  const float* w = weight.data<float>();
  const float* s = rstd.data<float>();
  const float* dys = dy.data<float>();
  float* dxs = dx.data<float>();

  const int64_t blocks = std::min(kMaxRowBlocks, (rows + kMinRowsPerBlock - 1) / kMinRowsPerBlock);
  const int64_t rows_per_block = (rows + blocks - 1) / blocks;
  std::vector<double> partial(static_cast<size_t>(blocks * d), 0.0);
#pragma omp parallel for schedule(static) if (rows * d >= kParallelMinElements)
  for (int64_t b = 0; b < blocks; ++b) {
    double* dw = partial.data() + b * d;
    const int64_t r1 = std::min(rows, (b + 1) * rows_per_block);
    for (int64_t r = b * rows_per_block; r < r1; ++r) {
      const float* xr = xs + r * d;
      const float* dyr = dys + r * d;
      float* dxr = dxs + r * d;
      const float sr = s[r];
      // mean_j(w*dy*n) = rstd * sum_j(w*dy*x) / d.
      double dot_acc[kLanes] = {};
      int64_t j = 0;
      for (; j + kLanes <= d; j += kLanes) {
        for (int k = 0; k < kLanes; ++k) {
          const int64_t i = j + k;
          dot_acc[k] += static_cast<double>(w[i] * dyr[i]) * xr[i];
          dw[i] += static_cast<double>(dyr[i]) * (xr[i] * sr);
        }
      }
      for (; j < d; ++j) {
        dot_acc[0] += static_cast<double>(w[j] * dyr[j]) * xr[j];
        dw[j] += static_cast<double>(dyr[j]) * (xr[j] * sr);
      }
      const double dot = ((dot_acc[0] + dot_acc[1]) + (dot_acc[2] + dot_acc[3])) +
                         ((dot_acc[4] + dot_acc[5]) + (dot_acc[6] + dot_acc[7]));
      const float mean = static_cast<float>(dot * sr / static_cast<double>(d));
      // Reads dy[j] before writing dx[j]: dx may alias dy.
      for (int64_t i = 0; i < d; ++i) dxr[i] = sr * (w[i] * dyr[i] - (xr[i] * sr) * mean);
    }
  }
  float* dweight_data = dweight.data<float>();
  for (int64_t j = 0; j < d; ++j) {
    double sum = 0.0;
    for (int64_t b = 0; b < blocks; ++b) sum += partial[b * d + j];
    dweight_data[j] += static_cast<float>(sum);
  }
}

}  // namespace sbp::cpu
