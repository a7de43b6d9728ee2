// Decoupled AdamW on fp32 master weights (CPU), the update of PyTorch's
// torch.optim.AdamW (amsgrad=False, maximize=False), element by element:
//
//   g = grad_scale * grad
//   p = p - lr * wd * p                      (PyTorch: p.mul_(1 - lr * wd))
//   m = b1 * m + (1 - b1) * g
//   v = b2 * v + (1 - b2) * g * g
//   denom = sqrt(v) / sqrt(1 - b2^step) + eps
//   p = p - (lr / (1 - b1^step)) * m / denom
//
// which equals backend.h's p -= lr * (wd p + m_hat / (sqrt(v_hat) + eps)) with
// m_hat = m / (1 - b1^step), v_hat = v / (1 - b2^step). The bias corrections,
// 1 - lr * wd and lr / (1 - b1^step) are computed in double (as PyTorch does
// with Python floats) and applied in fp32.
//
// Shapes: param, grad, m, v f32, all the same shape. m and v are the optimizer
// state (updated in place, zero before step 1); step is 1-based.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace sbp::cpu {

void AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& params);

// AdamW of a [rows, cols] table (param, m, v) whose gradient is zero but in
// the rows given: `nonzero` (row, slot) pairs, row `row`'s gradient at
// values[slot * cols, (slot + 1) * cols). The same floats, bit for bit, as
// AdamW with the dense gradient; zero rows still decay their moments and
// weights, as they do there.
void AdamWRows(Tensor& param, const std::vector<std::pair<int32_t, int32_t>>& nonzero,
               const float* values, Tensor& m, Tensor& v, const AdamWParams& params);

}  // namespace sbp::cpu
