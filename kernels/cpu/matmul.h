// The three GEMM layouts of a linear layer y = x W^T, plus its bias (CPU,
// fp32, one cblas_sgemm each on OpenBLAS).
//
//   MatmulXWt:       y  [N, M]  = x  [N, K] . w [M, K]^T   (+= when accumulate)
//   MatmulDyW:       dx [N, K]  = dy [N, M] . w [M, K]     (+= when accumulate)
//   MatmulAccumDyTX: dw [M, K] += dy [N, M]^T . x [N, K]
//   AddBias:         y  [N, M] += bias [M]  (every row)
//   BiasBackward:    dbias [M] += sum over rows of dy [N, M]
//
// MatmulXWt with a few rows and a large w (a decode step) streams w once
// instead (matmul_few_rows.h).
// Row tensors ([N, K], [N, M]) may have any leading dims: N = numel / last dim.
// w and dw are [M, K]. Nothing is saved; the backward of a linear layer needs
// its input x and w. BiasBackward sums columns in double over the rows in
// order, parallel over column blocks: independent of the thread count.
#pragma once

#include "kernels/tensor.h"

namespace sbp::cpu {

void MatmulXWt(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate);
void MatmulDyW(const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate);
void MatmulAccumDyTX(const Tensor& dy, const Tensor& x, Tensor& dw);
void AddBias(Tensor& y, const Tensor& bias);
void BiasBackward(const Tensor& dy, Tensor& dbias);

}  // namespace sbp::cpu
