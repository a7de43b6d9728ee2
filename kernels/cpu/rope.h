// Rotary position embedding, Hugging Face rotate_half convention (CPU, fp32),
// in place.
//
//   row t of x [T, H, d] has position p = position_offset + t;
//   inv_freq_i = theta^(-2i/d), angle_ti = p * inv_freq_i  (i < d/2, in double);
//   x1 = x[..., :d/2], x2 = x[..., d/2:]:
//   forward:  (x1, x2) <- (x1 c - x2 s, x2 c + x1 s)
//   backward: (g1, g2) <- (g1 c + g2 s, g2 c - g1 s)   (the transposed rotation)
//
// Shapes: x / dx [T, H, d] f32 with d = head_dim even. Nothing is saved: the
// angles are recomputed from (position_offset, theta, d). cos/sin are
// evaluated in double once per (t, i) and shared by the H heads of row t.
// Rows are independent, so a chunk [s, e) with offset s gives rows [s, e) of
// the whole-sequence result.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace sbp::cpu {

void RopeForward(Tensor& x, int64_t position_offset, double theta);
void RopeBackward(Tensor& dx, int64_t position_offset, double theta);

}  // namespace sbp::cpu
