#include "kernels/cpu/sgemm_peak.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace sbp::cpu {

double MeasureSgemmGflops(int n, int repeats) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, seconds);
  }
  return 2.0 * n * n * n / best / 1e9;
}

}  // namespace sbp::cpu
