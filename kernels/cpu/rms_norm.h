// RMSNorm over the last dim D = weight.numel() (CPU, fp32).
//
//   forward:  rstd_r = 1 / sqrt(mean_j x_rj^2 + eps),  y_rj = x_rj * rstd_r * w_j
//   backward: n = x * rstd,  dx_r = rstd_r * (w*dy_r - n_r * mean_j(w*dy_r*n_r)),
//             dweight_j += sum_r dy_rj * n_rj
//
// Shapes: x, y, dy, dx [..., D] f32 (rows = numel / D; Qwen3's per-head q/k
// norm passes [T, H, d] with weight [d]); weight, dweight [D]; rstd [rows]
// (any shape with `rows` elements), saved by the forward for the backward.
// y may alias x, dx may alias dy. Row sums are accumulated in double.
// dweight is reduced over fixed blocks of rows (per-block double partials added
// in block order), so it is race-free and independent of the thread count.
#pragma once

#include "kernels/tensor.h"

namespace sbp::cpu {

void RmsNormForward(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor* rstd);
void RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                     Tensor& dx, Tensor& dweight);

}  // namespace sbp::cpu
