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

// The peak an MFU figure is measured against on `backend`'s device: the
// same process's sgemm rate on the CPU (fp32 compute), the bf16 matmul rate
// (n = 8192) on a GPU, whatever the job's precision. The tensors are freed
// and the allocator's peak reset before it returns, so the figure costs a
// run no memory.
absl::StatusOr<double> ReferenceMatmulGflops(Backend& backend);

}  // namespace sbp
