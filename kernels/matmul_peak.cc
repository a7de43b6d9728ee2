#include "kernels/matmul_peak.h"

#include <algorithm>
#include <chrono>

#include "kernels/cpu/sgemm_peak.h"
#include "kernels/random.h"

namespace sbp {
namespace {

// Operands of random values in [-1, 1). Not constants: on Hopper a GEMM on
// constant data runs ~13% faster than on random data (bf16 8192^3 on an
// H200: 894 against 788 TFLOP/s), which would make every MFU measured
// against this peak read ~12% low.
absl::Status FillRandom(Backend& backend, Tensor& t, uint64_t seed) {
  if (t.device().is_cpu()) {
    FillUniform(t, seed, -1.0f, 1.0f);
    return absl::OkStatus();
  }
  CpuAllocator host;
  auto staging = Tensor::Empty(host, t.shape(), t.dtype(), "matmul peak operand staging");
  if (!staging.ok()) return staging.status();
  FillUniform(*staging, seed, -1.0f, 1.0f);
  backend.Copy(*staging, t);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<double> MeasureMatmulGflops(Backend& backend, DType dtype, int64_t n, int rounds) {
  constexpr int kPerRound = 10;
  Allocator& allocator = backend.allocator();
  auto x = Tensor::Empty(allocator, {n, n}, dtype, "matmul peak x");
  if (!x.ok()) return x.status();
  auto w = Tensor::Empty(allocator, {n, n}, dtype, "matmul peak w");
  if (!w.ok()) return w.status();
  auto y = Tensor::Empty(allocator, {n, n}, dtype, "matmul peak y");
  if (!y.ok()) return y.status();
  if (absl::Status s = FillRandom(backend, *x, 1); !s.ok()) return s;
  if (absl::Status s = FillRandom(backend, *w, 2); !s.ok()) return s;
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
