// SwiGLU gating of the MLP (CPU, fp32).
//
//   forward:  out = silu(gate) * up,  silu(g) = g * sigmoid(g)
//   backward: dgate = dout * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))),
//             dup   = dout * silu(g)
//
// Shapes: gate, up, out, dout, dgate, dup all [N, F] f32 (any equal shapes).
// The backward needs the forward's inputs gate and up (nothing else is
// saved). dgate may alias gate and dup may alias up: each element is read
// before it is written. out may alias gate or up.
#pragma once

#include "kernels/tensor.h"

namespace sbp::cpu {

void SwigluForward(const Tensor& gate, const Tensor& up, Tensor& out);
void SwigluBackward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate,
                    Tensor& dup);

}  // namespace sbp::cpu
