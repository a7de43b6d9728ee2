#include "kernels/matmul_peak.h"

#include <algorithm>
#include <chrono>

#include "kernels/cpu/sgemm_peak.h"

namespace sbp {

absl::StatusOr<double> MeasureMatmulGflops(Backend& backend, DType dtype, int64_t n, int rounds) {
  constexpr int kPerRound = 10;
  Allocator& allocator = backend.allocator();
  auto x = Tensor::Empty(allocator, {n, n}, dtype, "matmul peak x");
  if (!x.ok()) return x.status();
  auto w = Tensor::Empty(allocator, {n, n}, dtype, "matmul peak w");
  if (!w.ok()) return w.status();
  auto y = Tensor::Empty(allocator, {n, n}, dtype, "matmul peak y");
  if (!y.ok()) return y.status();
  backend.Fill(*x, 0.5f);
  backend.Fill(*w, 0.25f);
  for (int i = 0; i < 2; ++i) backend.MatmulXWt(*x, *w, *y, false);
  backend.Synchronize();
  double best = 1e30;
  for (int round = 0; round < std::max(rounds, 1); ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kPerRound; ++i) backend.MatmulXWt(*x, *w, *y, false);
    backend.Synchronize();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, seconds / kPerRound);
  }
  const double flops =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  return flops / best / 1e9;
}

absl::StatusOr<double> ReferenceMatmulGflops(Backend& backend) {
  if (backend.device().is_cpu()) return cpu::MeasureSgemmGflops(1024, 2);
  const int64_t before = backend.allocator().peak_bytes();
  absl::StatusOr<double> gflops = MeasureMatmulGflops(backend, DType::kBF16, 8192, 2);
  backend.Synchronize();
  backend.allocator().ResetPeak();
  backend.allocator().RaisePeak(before);
  return gflops;
}

}  // namespace sbp
