// Rotary position embedding, Hugging Face rotate_half convention (CPU, fp32),
// in place, with the model's precomputed table (kernels/rope_table.h).
//
//   row t of x [T, H, d] has position p = position_offset + t;
//   angle_ti = p * inv_freq_i (i < d/2, in double), m = attention_scaling;
//   c = m cos(angle), s = m sin(angle)  (as Hugging Face scales cos/sin);
//   x1 = x[..., :d/2], x2 = x[..., d/2:]:
//   forward:  (x1, x2) <- (x1 c - x2 s, x2 c + x1 s)
//   backward: (g1, g2) <- (g1 c + g2 s, g2 c - g1 s)   (the transposed map)
//
// Shapes: x / dx [T, H, d] f32 with d = rope.head_dim(). Nothing is saved:
// the angles are recomputed from position_offset and the table. c and s are
// evaluated in double once per (t, i), rounded to fp32 and shared by the H
// heads of row t. Rows are independent, so a chunk [s, e) with offset s gives
// rows [s, e) of the whole-sequence result.
//
// With document offsets (kernels/documents.h, host i32), row t's position is
// p - DocumentStart(p) for p = position_offset + t: each packed document
// restarts at position 0.
#pragma once

#include <cstdint>

#include "kernels/rope_table.h"
#include "kernels/tensor.h"

namespace sbp::cpu {

void RopeForward(Tensor& x, int64_t position_offset, const RopeTable& rope,
                 const Tensor* doc_offsets = nullptr);
void RopeBackward(Tensor& dx, int64_t position_offset, const RopeTable& rope,
                  const Tensor* doc_offsets = nullptr);

}  // namespace sbp::cpu
