// Reductions and elementwise ops (CPU).
//
//   SumSquares: returns sum_i x_i^2 in double (x f32 or bf16). Partial sums
//               over fixed blocks (chosen from numel only) are added in block
//               order: deterministic and independent of the thread count.
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

#include "kernels/tensor.h"

namespace sbp::cpu {

double SumSquares(const Tensor& x);
void Add(const Tensor& a, const Tensor& b, Tensor& out);
void Axpy(float alpha, const Tensor& x, Tensor& y);
void Scale(Tensor& x, float s);
void Fill(Tensor& x, float value);
void Cast(const Tensor& src, Tensor& dst);
void Copy(const Tensor& src, Tensor& dst);

}  // namespace sbp::cpu
