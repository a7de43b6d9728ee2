#include "worker/train/optimizer.h"

#include <cmath>

#include "common/check.h"
#include "common/status_macros.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/elementwise.h"
#include "worker/engine/device_store.h"

namespace sbp {

absl::StatusOr<AdamWOptimizer> AdamWOptimizer::Create(const ParameterStore& layout,
                                                      Backend& backend, const TrainSpec& train) {
  ASSIGN_OR_RETURN(ParameterStore m,
                   ZeroStoreOnDevice(layout, backend, DType::kF32, "AdamW exp_avg"));
  ASSIGN_OR_RETURN(ParameterStore v,
                   ZeroStoreOnDevice(layout, backend, DType::kF32, "AdamW exp_avg_sq"));
  return AdamWOptimizer(backend, train, std::move(m), std::move(v));
}

double AdamWOptimizer::GlobalGradNorm(Backend& backend, const ParameterStore& grads,
                                      const cpu::EmbeddingRowGradient* embed_rows) {
  double sum = 0;
  for (size_t g = 0; g < grads.groups().size(); ++g) {
    const ParameterGroup& group = grads.groups()[g];
    if (embed_rows != nullptr && static_cast<int>(g) == grads.embed_group()) {
      CHECK(backend.device().is_cpu()) << "the embedding's row set is a CPU gradient";
      sum += cpu::SumSquaresOfRows(embed_rows->vocab(), embed_rows->hidden(),
                                   embed_rows->sorted_rows(), embed_rows->values_data());
      continue;
    }
    sum += backend.SumSquares(group.flat.Rows(0, group.numel));
  }
  return std::sqrt(sum);
}

void AdamWOptimizer::Step(ParameterStore& weights, const ParameterStore& grads, double lr,
                          int64_t step, float grad_scale,
                          const cpu::EmbeddingRowGradient* embed_rows) {
  AdamWParams params = AdamWStepParams(train_, lr, step, grad_scale);
  for (size_t g = 0; g < weights.groups().size(); ++g) {
    ParameterGroup& w = weights.groups()[g];
    const ParameterGroup& dw = grads.groups()[g];
    ParameterGroup& m = m_.groups()[g];
    ParameterGroup& v = v_.groups()[g];
    const bool rows = embed_rows != nullptr && static_cast<int>(g) == weights.embed_group();
    for (size_t i = 0; i < w.tensors.size(); ++i) {
      params.weight_decay = WeightDecayFor(w.specs[i].kind, train_.weight_decay);
      if (rows) {
        CHECK(backend_->device().is_cpu()) << "the embedding's row set is a CPU gradient";
        cpu::AdamWRows(w.tensors[i], embed_rows->sorted_rows(), embed_rows->values_data(),
                       m.tensors[i], v.tensors[i], params);
      } else {
        backend_->AdamW(w.tensors[i], dw.tensors[i], m.tensors[i], v.tensors[i], params);
      }
    }
  }
}

AdamWParams AdamWStepParams(const TrainSpec& train, double lr, int64_t step, float grad_scale) {
  AdamWParams params;
  params.lr = lr;
  params.beta1 = train.beta1;
  params.beta2 = train.beta2;
  params.eps = train.eps;
  params.step = step;
  params.grad_scale = grad_scale;
  return params;
}

float ClipScale(double grad_norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(grad_norm)) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (grad_norm + 1e-6)));
}

}  // namespace sbp
