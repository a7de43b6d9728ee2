// The matmul rate a backend really reaches, the reference for MFU figures
// (a datasheet peak is not what cuBLAS or OpenBLAS attain): square products
// y = x w^T through Backend::MatmulXWt, timed between synchronisations.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace sbp {

// Best rate over `rounds` rounds of 10 products of n x n x n in `dtype`
// storage (after two untimed ones), in GFLOP/s (2 n^3 per product).
// ResourceExhausted when the three n x n tensors do not fit.
absl::StatusOr<double> MeasureMatmulGflops(Backend& backend, DType dtype, int64_t n = 8192,
                                           int rounds = 5);

}  // namespace sbp
