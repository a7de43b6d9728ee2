// Token embedding lookup (CPU, fp32).
//
//   forward:  out[t, :] = table[ids[t], :]
//   backward: dtable[ids[t], :] += dout[t, :]   (scatter-add; repeated ids sum)
//
// Shapes: table/dtable [V, H] f32, ids [T] i32 (any shape with T elements),
// out/dout [T, H] f32 (any shape with last dim H and T*H elements).
// Nothing is saved for backward beyond the ids. An id outside [0, V) is a
// CHECK failure naming the id, its position and V. The backward is
// parallel over hidden columns, so every dtable element is summed by one
// thread in token order: race-free and independent of the thread count.
#pragma once

#include "kernels/tensor.h"

namespace sbp::cpu {

void EmbeddingForward(const Tensor& table, const Tensor& ids, Tensor& out);
void EmbeddingBackward(const Tensor& ids, const Tensor& dout, Tensor& dtable);

}  // namespace sbp::cpu
