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

#include <cstdint>

#include "kernels/tensor.h"

namespace sbp::cpu {

void EmbeddingForward(const Tensor& table, const Tensor& ids, Tensor& out);
void EmbeddingBackward(const Tensor& ids, const Tensor& dout, Tensor& dtable);

// The backward's summation: acc[rows[t], :] += dout[t, :] for t in order,
// each thread owning a range of columns (a multiple of 16 floats), so every
// element is summed in token order whatever the thread count. `rows` are
// already checked against acc's row count; acc has `hidden` columns. Shared
// by the dense table gradient and the row-set one (embedding_rows.h), which
// must sum in the same order to stay bit-identical.
void AccumulateRowsInOrder(const float* dout, const int32_t* rows, int64_t tokens, int64_t hidden,
                           float* acc);

}  // namespace sbp::cpu
