#include "worker/engine/lora_store.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "kernels/random.h"
#include "worker/engine/engine.h"

namespace sbp {
namespace {

bool IsMlp(absl::string_view module) {
  return module == "gate_proj" || module == "up_proj" || module == "down_proj";
}

LoraAdapter LayerAdapters::*AdapterField(absl::string_view module) {
  if (module == "q_proj") return &LayerAdapters::q_proj;
  if (module == "k_proj") return &LayerAdapters::k_proj;
  if (module == "v_proj") return &LayerAdapters::v_proj;
  if (module == "o_proj") return &LayerAdapters::o_proj;
  if (module == "gate_proj") return &LayerAdapters::gate_proj;
  if (module == "up_proj") return &LayerAdapters::up_proj;
  CHECK(module == "down_proj") << module;
  return &LayerAdapters::down_proj;
}

}  // namespace

std::string PeftAdapterKey(int layer, absl::string_view module, bool matrix_a) {
  return absl::StrCat("base_model.model.model.layers.", layer,
                      IsMlp(module) ? ".mlp." : ".self_attn.", module,
                      matrix_a ? ".lora_A.weight" : ".lora_B.weight");
}

std::pair<int64_t, int64_t> LoraModuleShape(const ModelConfig& c, absl::string_view module) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  if (module == "q_proj") return {H, c.q_dim()};
  if (module == "k_proj" || module == "v_proj") return {H, c.kv_dim()};
  if (module == "o_proj") return {c.q_dim(), H};
  if (module == "gate_proj" || module == "up_proj") return {H, I};
  CHECK(module == "down_proj") << module;
  return {I, H};
}

absl::StatusOr<ParameterStore> CreateLoraStore(const ModelConfig& config,
                                               const LoraOptions& options, Allocator& allocator,
                                               absl::string_view what, int64_t pad_multiple) {
  RETURN_IF_ERROR(ValidateLoraOptions(options));
  ParameterStore::Layout layout;
  layout.emplace_back("embed", std::vector<ParamSpec>());
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    std::vector<ParamSpec> specs;
    for (const std::string& module : LoraModuleNames()) {
      if (!options.targets(module)) continue;
      const auto [in, out] = LoraModuleShape(config, module);
      specs.push_back({PeftAdapterKey(i, module, true), {options.r, in}, ParamKind::kLinear, i});
      specs.push_back({PeftAdapterKey(i, module, false), {out, options.r}, ParamKind::kLinear, i});
    }
    layout.emplace_back(absl::StrCat("layer.", i), std::move(specs));
  }
  layout.emplace_back("final", std::vector<ParamSpec>());
  // Adapters are kept and saved in f32 whatever the base model's dtype.
  ModelConfig adapter_config = config;
  adapter_config.torch_dtype = "float32";
  ASSIGN_OR_RETURN(ParameterStore store,
                   ParameterStore::CreateWithLayout(adapter_config, std::move(layout), allocator,
                                                    what, pad_multiple));
  store.set_lora(options);
  return store;
}

void InitLoraWeights(ParameterStore& adapters) {
  CHECK(adapters.lora() != nullptr);
  const uint64_t seed = adapters.lora()->init_seed;
  uint64_t index = 0;
  for (auto& [name, tensor] : adapters.NamedTensors()) {
    Tensor t = tensor;
    if (absl::StrContains(name, ".lora_A.")) {
      const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(t.dim(1))));
      FillUniform(t, HashIndex(seed, index), -bound, bound);
    }  // B stays zero (the store is created zero-filled)
    ++index;
  }
}

ModelTensors BindAdapterTensors(const ParameterStore& store) {
  const LoraOptions& options = *store.lora();
  ModelTensors m;
  m.layers.resize(store.config().num_hidden_layers);
  for (int i = 0; i < store.config().num_hidden_layers; ++i) {
    LayerAdapters& layer = m.layers[i].lora;
    layer.scale = static_cast<float>(options.scaling());
    for (const std::string& module : LoraModuleNames()) {
      if (!options.targets(module)) continue;
      LoraAdapter& adapter = layer.*AdapterField(module);
      auto a = store.Find(PeftAdapterKey(i, module, true));
      auto b = store.Find(PeftAdapterKey(i, module, false));
      CHECK(a.ok() && b.ok()) << a.status() << " " << b.status();
      adapter.a = *a;
      adapter.b = *b;
    }
  }
  return m;
}

void AttachAdapters(const ParameterStore& adapters, ModelTensors& weights) {
  const ModelTensors bound = BindAdapterTensors(adapters);
  CHECK_EQ(bound.layers.size(), weights.layers.size());
  for (size_t i = 0; i < bound.layers.size(); ++i) weights.layers[i].lora = bound.layers[i].lora;
}

int64_t AdapterParameterCount(const ModelTensors& tensors) {
  int64_t n = 0;
  for (const LayerWeights& layer : tensors.layers) {
    for (const LoraAdapter* a :
         {&layer.lora.q_proj, &layer.lora.k_proj, &layer.lora.v_proj, &layer.lora.o_proj,
          &layer.lora.gate_proj, &layer.lora.up_proj, &layer.lora.down_proj}) {
      if (a->defined()) n += a->a.numel() + a->b.numel();
    }
  }
  return n;
}

double LoraFlopsPerTokenChange(const ModelConfig& c, const ModelTensors& weights) {
  const int64_t adapters = AdapterParameterCount(weights);
  if (adapters == 0) return 0;
  const double H = c.hidden_size, I = c.intermediate_size, q = c.q_dim(), kv = c.kv_dim();
  const double matmul_params =
      c.num_hidden_layers * (H * q + 2 * H * kv + q * H + 3 * H * I) + c.vocab_size * H;
  return -2.0 * matmul_params + 6.0 * static_cast<double>(adapters);
}

double LoraTrainingFlops(const ModelConfig& c, const ModelTensors& weights, int64_t tokens) {
  return TrainingFlops(c, tokens) +
         static_cast<double>(tokens) * LoraFlopsPerTokenChange(c, weights);
}

int64_t LoraRank(const ModelTensors& tensors) {
  int64_t r = 0;
  for (const LayerWeights& layer : tensors.layers) {
    for (const LoraAdapter* a :
         {&layer.lora.q_proj, &layer.lora.k_proj, &layer.lora.v_proj, &layer.lora.o_proj,
          &layer.lora.gate_proj, &layer.lora.up_proj, &layer.lora.down_proj}) {
      if (a->defined()) r = std::max(r, a->a.dim(0));
    }
  }
  return r;
}

}  // namespace sbp
