#include "worker/engine/parameter_store.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/lora_store.h"

namespace sbp {
namespace {

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

absl::StatusOr<ParameterStore> ParameterStore::Create(const ModelConfig& config,
                                                      Allocator& allocator, absl::string_view what,
                                                      int64_t pad_multiple) {
  Layout layout;
  layout.emplace_back("embed", EmbeddingParameterSpecs(config));
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    layout.emplace_back(absl::StrCat("layer.", i), LayerParameterSpecs(config, i));
  }
  layout.emplace_back("final", FinalParameterSpecs(config));
  return CreateWithLayout(config, std::move(layout), allocator, what, pad_multiple);
}

absl::StatusOr<ParameterStore> ParameterStore::CreateWithLayout(const ModelConfig& config,
                                                                Layout layout, Allocator& allocator,
                                                                absl::string_view what,
                                                                int64_t pad_multiple) {
  CHECK_GE(pad_multiple, 1);
  ParameterStore store;
  store.config_ = config;
  for (auto& [group_name, specs] : layout) {
    ParameterGroup group;
    group.name = group_name;
    group.numel = TotalElements(specs);
    const int64_t padded = RoundUp(std::max<int64_t>(group.numel, 1), pad_multiple);
    ASSIGN_OR_RETURN(group.flat, Tensor::Zeros(allocator, {padded}, DType::kF32,
                                               absl::StrCat(what, " ", group_name)));
    int64_t offset = 0;
    for (const ParamSpec& spec : specs) {
      const int64_t n = NumElements(spec.shape);
      group.tensors.push_back(group.flat.Rows(offset, offset + n).Reshape(spec.shape));
      store.index_[spec.name] = {static_cast<int>(store.groups_.size()),
                                 static_cast<int>(group.tensors.size()) - 1};
      offset += n;
    }
    group.specs = std::move(specs);
    store.groups_.push_back(std::move(group));
  }
  return store;
}

absl::StatusOr<ParameterStore> ParameterStore::FromWeights(const ModelWeights& weights,
                                                           Allocator& allocator,
                                                           absl::string_view what,
                                                           int64_t pad_multiple) {
  ASSIGN_OR_RETURN(ParameterStore store, Create(weights.config, allocator, what, pad_multiple));
  RETURN_IF_ERROR(CopyIntoStore(weights.params, store));
  return store;
}

absl::StatusOr<ParameterStore> ParameterStore::Load(const std::string& dir, Allocator& allocator,
                                                    absl::string_view what, int64_t pad_multiple) {
  CpuAllocator staging;
  ASSIGN_OR_RETURN(ModelWeights weights, LoadModelDirectory(dir, staging));
  return FromWeights(weights, allocator, what, pad_multiple);
}

absl::StatusOr<Tensor> ParameterStore::Find(absl::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end() && config_.tie_word_embeddings && name == "lm_head.weight") {
    it = index_.find("model.embed_tokens.weight");
  }
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat("no parameter named '", name, "'"));
  }
  return groups_[it->second.first].tensors[it->second.second];
}

std::vector<std::pair<std::string, Tensor>> ParameterStore::NamedTensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const ParameterGroup& group : groups_) {
    for (size_t i = 0; i < group.specs.size(); ++i) {
      out.emplace_back(group.specs[i].name, group.tensors[i]);
    }
  }
  return out;
}

void ParameterStore::Zero() {
  for (ParameterGroup& group : groups_) {
    std::memset(group.flat.raw_data(), 0, group.flat.nbytes());
  }
}

int64_t ParameterStore::total_bytes() const {
  int64_t bytes = 0;
  for (const ParameterGroup& group : groups_) bytes += static_cast<int64_t>(group.flat.nbytes());
  return bytes;
}

ModelTensors BindModelTensors(const ParameterStore& store) {
  if (store.lora() != nullptr) return BindAdapterTensors(store);
  const ModelConfig& config = store.config();
  auto get = [&](const std::string& name) {
    auto t = store.Find(name);
    CHECK(t.ok()) << t.status();
    return *t;
  };
  auto get_optional = [&](const std::string& name, bool present) {
    return present ? get(name) : Tensor();
  };
  ModelTensors m;
  m.embed = get("model.embed_tokens.weight");
  const bool bias = config.attention_bias;
  const bool qk_norm = config.qk_norm;
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    LayerWeights w;
    w.input_norm = get(p + "input_layernorm.weight");
    w.q_proj = get(p + "self_attn.q_proj.weight");
    w.k_proj = get(p + "self_attn.k_proj.weight");
    w.v_proj = get(p + "self_attn.v_proj.weight");
    w.q_bias = get_optional(p + "self_attn.q_proj.bias", bias);
    w.k_bias = get_optional(p + "self_attn.k_proj.bias", bias);
    w.v_bias = get_optional(p + "self_attn.v_proj.bias", bias);
    w.o_proj = get(p + "self_attn.o_proj.weight");
    w.q_norm = get_optional(p + "self_attn.q_norm.weight", qk_norm);
    w.k_norm = get_optional(p + "self_attn.k_norm.weight", qk_norm);
    w.post_norm = get(p + "post_attention_layernorm.weight");
    w.gate_proj = get(p + "mlp.gate_proj.weight");
    w.up_proj = get(p + "mlp.up_proj.weight");
    w.down_proj = get(p + "mlp.down_proj.weight");
    m.layers.push_back(std::move(w));
  }
  m.final_norm = get("model.norm.weight");
  m.lm_head = get("lm_head.weight");  // the embedding when tied
  return m;
}

void BindGroupTensors(const ParameterStore& layout, int group, float* base, ModelTensors& out) {
  const ModelTensors views = BindModelTensors(layout);
  // The layout may be a bf16 compute copy: offsets are counted in its
  // elements, then applied to the f32 memory at `base`.
  const Tensor& flat = layout.groups()[group].flat;
  const auto* origin = static_cast<const char*>(flat.raw_data());
  const auto element = static_cast<int64_t>(DTypeSize(flat.dtype()));
  auto rebase = [&](const Tensor& t) {
    if (!t.defined()) return Tensor();
    const int64_t offset = (static_cast<const char*>(t.raw_data()) - origin) / element;
    return Tensor::Wrap(base + offset, t.shape(), DType::kF32, t.device());
  };
  const int L = layout.config().num_hidden_layers;
  out.layers.resize(L);
  if (layout.lora() != nullptr) {
    // Adapters live in the layer groups only.
    if (group != layout.embed_group() && group != layout.final_group()) {
      const LayerAdapters& v = views.layers[group - 1].lora;
      LayerAdapters& o = out.layers[group - 1].lora;
      for (LoraAdapter LayerAdapters::*field :
           {&LayerAdapters::q_proj, &LayerAdapters::k_proj, &LayerAdapters::v_proj,
            &LayerAdapters::o_proj, &LayerAdapters::gate_proj, &LayerAdapters::up_proj,
            &LayerAdapters::down_proj}) {
        (o.*field).a = rebase((v.*field).a);
        (o.*field).b = rebase((v.*field).b);
      }
    }
    return;
  }
  if (group == layout.embed_group()) {
    out.embed = rebase(views.embed);
    if (layout.config().tie_word_embeddings) out.lm_head = out.embed;
  } else if (group == layout.final_group()) {
    out.final_norm = rebase(views.final_norm);
    if (!layout.config().tie_word_embeddings) out.lm_head = rebase(views.lm_head);
  } else {
    const LayerWeights& v = views.layers[group - 1];
    LayerWeights& o = out.layers[group - 1];
    for (Tensor LayerWeights::*field :
         {&LayerWeights::input_norm, &LayerWeights::q_proj, &LayerWeights::q_bias,
          &LayerWeights::k_proj, &LayerWeights::k_bias, &LayerWeights::v_proj,
          &LayerWeights::v_bias, &LayerWeights::o_proj, &LayerWeights::q_norm,
          &LayerWeights::k_norm, &LayerWeights::post_norm, &LayerWeights::gate_proj,
          &LayerWeights::up_proj, &LayerWeights::down_proj}) {
      o.*field = rebase(v.*field);
    }
  }
}

absl::Status CopyIntoStore(const std::vector<std::pair<std::string, Tensor>>& named,
                           ParameterStore& store) {
  int64_t copied = 0;
  for (const auto& [name, source] : named) {
    if (store.config().tie_word_embeddings && name == "lm_head.weight") continue;
    ASSIGN_OR_RETURN(Tensor target, store.Find(name));
    if (source.shape() != target.shape() || source.dtype() != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "': expected f32",
                                                     ShapeString(target.shape()), ", got ",
                                                     source.DebugString()));
    }
    std::memcpy(target.raw_data(), source.raw_data(), target.nbytes());
    ++copied;
  }
  const int64_t expected = static_cast<int64_t>(store.NamedTensors().size());
  if (copied != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", expected, " parameters, got ", copied));
  }
  return absl::OkStatus();
}

}  // namespace sbp
