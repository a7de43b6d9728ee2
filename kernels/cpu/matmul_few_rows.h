// y = x w^T for an x of a few rows (a decode step: one row per sequence) and
// a large w, without the BLAS: an sgemm packs w into panels on every call,
// which for a handful of rows costs more than the product (w is read, written
// and read again; for a 151936 x 512 LM head that is 311 MB three times per
// step). Here w is streamed once: each w row, while in L1, is dotted with up
// to four rows of x at a time (four independent accumulator chains), parallel
// over blocks of w rows. Every y element is one thread's dot product in k
// order, so results do not depend on the thread count.
#pragma once

#include <cstdint>

namespace sbp::cpu {

// Where MatmulXWt takes this path: at most this many rows of x (on a 2-core
// AVX-512 Xeon with OpenBLAS 0.3.21, a 151936 x 512 w: 8 rows 35 ms here
// against 68 ms for the sgemm, 32 rows 82 against 113) ...
inline constexpr int64_t kFewRowsMaxRows = 32;
// ... and a weight of at least this many elements (256 KiB of fp32), below
// which the packing is cheap and the BLAS is kept.
inline constexpr int64_t kFewRowsMinWeightElements = int64_t{1} << 16;

inline bool UseFewRowsMatmul(int64_t rows, int64_t weight_elements) {
  return rows > 0 && rows <= kFewRowsMaxRows && weight_elements >= kFewRowsMinWeightElements;
}

// y [n, m] (+)= x [n, k] . w [m, k]^T, all row-major and contiguous.
void MatmulXWtFewRows(const float* x, int64_t n, const float* w, int64_t m, int64_t k, float* y,
                      bool accumulate);

}  // namespace sbp::cpu
