// The low-rank path of a LoRA linear layer, added to the base layer's
// output and gradients. With A [r, in], B [out, r], scale s, input x [n, in]
// and output gradient dy [n, out]:
//
//   forward:  u = s x A^T [n, r];  y += u B^T
//   backward: u = s x A^T (recomputed);  dB += dy^T u;
//             t = s dy B [n, r];  dA += t^T x;  dx += t A
//
// The backward is split in two because the base layer's dx often overwrites
// x: LoraBackwardParams reads x and dy and leaves t in its scratch, and
// LoraBackwardInput adds t A to dx once dx has been written. Parameter
// gradients accumulate (+=), so chunks of rows sum their contributions.
// Scratch u and t are [n, r] buffers in the activation dtype.
#pragma once

#include "kernels/backend.h"
#include "worker/engine/parameter_store.h"

namespace sbp {

// y += s (x A^T) B^T; no-op for an undefined adapter.
void LoraForward(Backend& backend, const LoraAdapter& w, float scale, const Tensor& x, Tensor u,
                 Tensor& y);

// g.b += dy^T (s x A^T); t = s dy B; g.a += t^T x. No-op for an undefined
// adapter; a frozen one (g undefined) only computes t.
void LoraBackwardParams(Backend& backend, const LoraAdapter& w, float scale, const Tensor& x,
                        const Tensor& dy, Tensor u, Tensor t, LoraAdapter& g);

// dx += t A (t from LoraBackwardParams); no-op for an undefined adapter.
void LoraBackwardInput(Backend& backend, const LoraAdapter& w, const Tensor& t, Tensor& dx);

}  // namespace sbp
