#include "worker/engine/lora_linear.h"

namespace sbp {

void LoraForward(Backend& backend, const LoraAdapter& w, float scale, const Tensor& x, Tensor u,
                 Tensor& y) {
  if (!w.defined()) return;
  backend.MatmulXWt(x, w.a, u, /*accumulate=*/false);
  backend.Scale(u, scale);
  backend.MatmulXWt(u, w.b, y, /*accumulate=*/true);
}

void LoraBackwardParams(Backend& backend, const LoraAdapter& w, float scale, const Tensor& x,
                        const Tensor& dy, Tensor u, Tensor t, LoraAdapter& g) {
  if (!w.defined()) return;
  if (g.defined()) {
    backend.MatmulXWt(x, w.a, u, /*accumulate=*/false);
    backend.Scale(u, scale);
    backend.MatmulAccumDyTX(dy, u, g.b);
  }
  backend.MatmulDyW(dy, w.b, t, /*accumulate=*/false);
  backend.Scale(t, scale);
  if (g.defined()) backend.MatmulAccumDyTX(t, x, g.a);
}

void LoraBackwardInput(Backend& backend, const LoraAdapter& w, const Tensor& t, Tensor& dx) {
  if (!w.defined()) return;
  backend.MatmulDyW(t, w.a, dx, /*accumulate=*/true);
}

}  // namespace sbp
