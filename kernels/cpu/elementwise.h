// Reductions and elementwise ops (CPU).
//
//   SumSquares: returns sum_i x_i^2 in double (x f32 or bf16). Partial sums
//               over fixed blocks (chosen from numel only) are added in block
//               order: deterministic and independent of the thread count.
//   SumSquaresOfRows: SumSquares of a [rows, cols] f32 table of which only
//               some rows are non-zero, given as those rows alone: the same
//               double bit for bit (the same blocks and accumulator lanes;
//               the zeros add nothing), in time linear in the rows given.
//   Add:   out = a + b              (f32, equal shapes; out may alias a or b)
//   Axpy:  y += alpha * x           (f32, equal shapes; y may alias x)
//   Scale: x *= s                   (f32)
//   Fill:  x = value                (f32, bf16 rounded to nearest even, or i32; an
//                                    i32 fill value must be an integer in range)
//   Cast:  dst = src                (f32 <-> bf16 via kernels/dtype.h, or a plain
//                                    copy when the dtypes are equal; equal shapes)
//   Copy:  dst = src                (equal shapes and dtypes, both on the host)
//
// Nothing is saved for backward: these are building blocks of the engine and
// the optimizer, not differentiated ops.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/tensor.h"

namespace sbp::cpu {

double SumSquares(const Tensor& x);
// `rows` (row, slot) pairs in ascending row order; row `row` of the table is
// values[slot * cols, (slot + 1) * cols), every other row is zero.
double SumSquaresOfRows(int64_t rows, int64_t cols,
                        const std::vector<std::pair<int32_t, int32_t>>& nonzero,
                        const float* values);
void Add(const Tensor& a, const Tensor& b, Tensor& out);
void Axpy(float alpha, const Tensor& x, Tensor& y);
void Scale(Tensor& x, float s);
void Fill(Tensor& x, float value);
void Cast(const Tensor& src, Tensor& dst);
void Copy(const Tensor& src, Tensor& dst);

}  // namespace sbp::cpu
