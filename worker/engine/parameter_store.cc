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
  ParameterStore store = CreateLayout(config, pad_multiple);
  for (ParameterGroup& group : store.groups_) {
    ASSIGN_OR_RETURN(Tensor flat, Tensor::Zeros(allocator, {group.padded}, DType::kF32,
                                                absl::StrCat(what, " ", group.name)));
    group.Attach(std::move(flat));
  }
  return store;
}

void ParameterGroup::Attach(Tensor memory) {
  CHECK_EQ(memory.numel(), padded) << "group " << name;
  flat = std::move(memory);
  tensors.clear();
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t n = NumElements(specs[i].shape);
    tensors.push_back(flat.Rows(offsets[i], offsets[i] + n).Reshape(specs[i].shape));
  }
}

void ParameterGroup::Detach() {
  flat = Tensor();
  tensors.assign(specs.size(), Tensor());
}

ParameterStore ParameterStore::BuildLayout(const ModelConfig& config, Layout layout,
                                           int64_t pad_multiple) {
  CHECK_GE(pad_multiple, 1);
  ParameterStore store;
  store.config_ = config;
  for (auto& [group_name, specs] : layout) {
    ParameterGroup group;
    group.name = group_name;
    group.numel = TotalElements(specs);
    group.padded = RoundUp(std::max<int64_t>(group.numel, 1), pad_multiple);
    int64_t offset = 0;
    for (const ParamSpec& spec : specs) {
      store.index_[spec.name] = {static_cast<int>(store.groups_.size()),
                                 static_cast<int>(group.offsets.size())};
      group.offsets.push_back(offset);
      offset += NumElements(spec.shape);
    }
    group.specs = std::move(specs);
    store.groups_.push_back(std::move(group));
  }
  return store;
}

ParameterStore ParameterStore::CreateLayout(const ModelConfig& config, int64_t pad_multiple) {
  Layout layout;
  layout.emplace_back("embed", EmbeddingParameterSpecs(config));
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    layout.emplace_back(absl::StrCat("layer.", i), LayerParameterSpecs(config, i));
  }
  layout.emplace_back("final", FinalParameterSpecs(config));
  return BuildLayout(config, std::move(layout), pad_multiple);
}

absl::StatusOr<ParameterStore> ParameterStore::CreateWithLayout(const ModelConfig& config,
                                                                Layout layout, Allocator& allocator,
                                                                absl::string_view what,
                                                                int64_t pad_multiple) {
  ParameterStore store = BuildLayout(config, std::move(layout), pad_multiple);
  for (ParameterGroup& group : store.groups_) {
    ASSIGN_OR_RETURN(Tensor flat, Tensor::Zeros(allocator, {group.padded}, DType::kF32,
                                                absl::StrCat(what, " ", group.name)));
    group.Attach(std::move(flat));
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
  const ParameterGroup& group = groups_[it->second.first];
  if (!group.flat.defined()) return Tensor();  // a layout-only store
  return group.tensors[it->second.second];
}

std::vector<std::pair<std::string, Tensor>> ParameterStore::NamedTensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const ParameterGroup& group : groups_) {
    for (size_t i = 0; i < group.specs.size(); ++i) {
      out.emplace_back(group.specs[i].name, group.flat.defined() ? group.tensors[i] : Tensor());
    }
  }
  return out;
}

void ParameterStore::Zero() {
  for (ParameterGroup& group : groups_) {
    if (group.flat.defined()) std::memset(group.flat.raw_data(), 0, group.flat.nbytes());
  }
}

int64_t ParameterStore::total_bytes() const {
  int64_t bytes = 0;
  for (const ParameterGroup& group : groups_) bytes += static_cast<int64_t>(group.flat.nbytes());
  return bytes;
}

namespace {

// The model's named views, each from `get` (an undefined tensor for a name
// it does not hold).
template <typename Get>
ModelTensors BindNamed(const ModelConfig& config, const Get& get) {
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
  m.lm_head = get(config.tie_word_embeddings ? "model.embed_tokens.weight"
                                             : "lm_head.weight");  // the embedding when tied
  return m;
}

}  // namespace

ModelTensors BindModelTensors(const ParameterStore& store) {
  if (store.lora() != nullptr) return BindAdapterTensors(store);
  return BindNamed(store.config(), [&](const std::string& name) {
    auto t = store.Find(name);
    CHECK(t.ok()) << t.status();
    return *t;
  });
}

void BindGroupTensors(const ParameterStore& layout, int group, const Tensor& memory,
                      ModelTensors& out) {
  const int L = layout.config().num_hidden_layers;
  out.layers.resize(L);
  if (layout.lora() != nullptr) {
    // The adapter store always has its memory: views are moved from it to
    // the same offsets (in its elements) of `memory`.
    const ModelTensors views = BindModelTensors(layout);
    const Tensor& flat = layout.groups()[group].flat;
    const auto* origin = static_cast<const char*>(flat.raw_data());
    const auto element = static_cast<int64_t>(DTypeSize(flat.dtype()));
    auto rebase = [&](const Tensor& t) {
      if (!t.defined()) return Tensor();
      const int64_t offset = (static_cast<const char*>(t.raw_data()) - origin) / element;
      char* base = static_cast<char*>(memory.raw_data());
      return Tensor::Wrap(base + offset * static_cast<int64_t>(DTypeSize(memory.dtype())),
                          t.shape(), memory.dtype(), memory.device());
    };
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
  // This group's views over `memory`, found by name. They do not own it (as
  // Wrap's views do not), so that memory its owner frees is not kept alive
  // by views left in `out`.
  ParameterGroup bound = layout.groups()[group];
  bound.Attach(Tensor::Wrap(memory.raw_data(), memory.shape(), memory.dtype(), memory.device()));
  absl::flat_hash_map<std::string, Tensor> by_name;
  for (size_t i = 0; i < bound.specs.size(); ++i) by_name[bound.specs[i].name] = bound.tensors[i];
  const ModelTensors views = BindNamed(layout.config(), [&](const std::string& name) {
    auto it = by_name.find(name);
    return it == by_name.end() ? Tensor() : it->second;
  });
  if (group == layout.embed_group()) {
    out.embed = views.embed;
    if (layout.config().tie_word_embeddings) out.lm_head = out.embed;
  } else if (group == layout.final_group()) {
    out.final_norm = views.final_norm;
    if (!layout.config().tie_word_embeddings) out.lm_head = views.lm_head;
  } else {
    const LayerWeights& v = views.layers[group - 1];
    LayerWeights& o = out.layers[group - 1];
    for (Tensor LayerWeights::*field :
         {&LayerWeights::input_norm, &LayerWeights::q_proj, &LayerWeights::q_bias,
          &LayerWeights::k_proj, &LayerWeights::k_bias, &LayerWeights::v_proj,
          &LayerWeights::v_bias, &LayerWeights::o_proj, &LayerWeights::q_norm,
          &LayerWeights::k_norm, &LayerWeights::post_norm, &LayerWeights::gate_proj,
          &LayerWeights::up_proj, &LayerWeights::down_proj}) {
      o.*field = v.*field;
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
