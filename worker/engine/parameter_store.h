// Model parameters (or their gradients) in flat per-group buffers with one
// view per tensor. Groups: the embedding, each decoder layer, and the final
// group (final norm + untied LM head). A group's tensors are contiguous in
// Hugging Face order, padded at the end to a multiple of `pad_multiple`
// elements — the layout ZeRO-2 reduce-scatters one layer at a time.
//
// Weights and gradients use the same layout; typed accessors (LayerWeights,
// ModelWeightsView) give the engine named tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/allocator.h"
#include "kernels/tensor.h"
#include "worker/engine/lora_options.h"
#include "worker/model/model_config.h"
#include "worker/model/model_io.h"

namespace sbp {
namespace cpu {
class EmbeddingRowGradient;
}  // namespace cpu

struct ParameterGroup {
  std::string name;    // "embed", "layer.3", "final"
  Tensor flat;         // [padded] (undefined in a layout-only store)
  int64_t numel = 0;   // elements used by tensors (before padding)
  int64_t padded = 0;  // numel rounded up to the store's pad multiple
  std::vector<ParamSpec> specs;
  std::vector<int64_t> offsets;  // element offset of each spec's tensor
  std::vector<Tensor> tensors;   // views into flat, same order as specs

  // Makes `memory` ([padded], any dtype) the group's flat buffer and binds
  // the tensor views into it.
  void Attach(Tensor memory);
  // Releases the flat buffer (the views become undefined); the layout stays.
  void Detach();
};

class ParameterStore {
 public:
  ParameterStore() = default;
  // Allocates zero-filled groups for `config` from `allocator`; `what` names
  // the allocations ("weights", "gradients").
  static absl::StatusOr<ParameterStore> Create(const ModelConfig& config, Allocator& allocator,
                                               absl::string_view what, int64_t pad_multiple = 1);

  // A store holding a copy of `weights`' parameters.
  static absl::StatusOr<ParameterStore> FromWeights(const ModelWeights& weights,
                                                    Allocator& allocator, absl::string_view what,
                                                    int64_t pad_multiple = 1);
  // Reads a model directory through a temporary host allocator, so that only
  // the store is charged to `allocator`.
  static absl::StatusOr<ParameterStore> Load(const std::string& dir, Allocator& allocator,
                                             absl::string_view what, int64_t pad_multiple = 1);

  // The groups, names, offsets and padding of Create's store without any
  // memory: every flat buffer and view undefined (Find answers an undefined
  // tensor). ZeRO-3 (worker/dist/sharded_weights.h) keeps its weights this
  // way and binds a group's views only while the group is gathered.
  static ParameterStore CreateLayout(const ModelConfig& config, int64_t pad_multiple = 1);

  // Zero-filled groups with the given tensors (group name, specs), in order.
  // The group numbering above (embed, layers, final) is the caller's to keep.
  using Layout = std::vector<std::pair<std::string, std::vector<ParamSpec>>>;
  static absl::StatusOr<ParameterStore> CreateWithLayout(const ModelConfig& config, Layout layout,
                                                         Allocator& allocator,
                                                         absl::string_view what,
                                                         int64_t pad_multiple);

  // Set on a store of LoRA adapters (lora_store.h) rather than model weights.
  const LoraOptions* lora() const { return lora_.has_value() ? &*lora_ : nullptr; }
  void set_lora(LoraOptions options) { lora_ = std::move(options); }

  const ModelConfig& config() const { return config_; }
  std::vector<ParameterGroup>& groups() { return groups_; }
  const std::vector<ParameterGroup>& groups() const { return groups_; }
  // Group index of the embedding (0), layer i (1 + i), final (L + 1).
  int embed_group() const { return 0; }
  int layer_group(int layer) const { return 1 + layer; }
  int final_group() const { return static_cast<int>(groups_.size()) - 1; }

  // Tensor by Hugging Face name; NotFound names it. For tied models
  // "lm_head.weight" resolves to the embedding. Undefined in a group that
  // has no memory (CreateLayout).
  absl::StatusOr<Tensor> Find(absl::string_view name) const;
  // Every tensor with its Hugging Face name, in order (tied head excluded).
  std::vector<std::pair<std::string, Tensor>> NamedTensors() const;

  // Sets every element (padding included) to zero.
  void Zero();
  int64_t total_bytes() const;

 private:
  // The groups of `layout` with their offsets and padding, no memory.
  static ParameterStore BuildLayout(const ModelConfig& config, Layout layout, int64_t pad_multiple);

  ModelConfig config_;
  std::vector<ParameterGroup> groups_;
  absl::flat_hash_map<std::string, std::pair<int, int>> index_;  // name -> (group, slot)
  std::optional<LoraOptions> lora_;
};

// The LoRA adapter of one linear layer: A [r, in], B [out, r]; undefined
// when the layer has none.
struct LoraAdapter {
  Tensor a, b;
  bool defined() const { return a.defined(); }
};

// The adapters of one decoder layer, and (on the weights side) their scale s.
struct LayerAdapters {
  LoraAdapter q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;
  float scale = 0;
};

// Named views of one decoder layer's tensors (biases and q/k norms undefined
// when the architecture has none).
// With LoRA, `lora` holds the adapters; the gradients of a LoRA run leave
// every base tensor undefined (frozen) and bind only the adapters.
struct LayerWeights {
  Tensor input_norm, q_proj, q_bias, k_proj, k_bias, v_proj, v_bias, o_proj;
  Tensor q_norm, k_norm, post_norm, gate_proj, up_proj, down_proj;
  LayerAdapters lora;
};

// Named views of a whole model: embedding, layers, final norm, LM head (the
// embedding itself when tied).
//
// On the gradient side of an untied model on the CPU, `embed` may be left
// undefined and `embed_rows` set instead: the embedding backward then adds
// into the rows the tokens touched (kernels/cpu/embedding_rows.h), not into a
// dense [V, H] buffer. A defined `embed` takes precedence (ZeRO-2 binds its
// gradient cache there).
struct ModelTensors {
  Tensor embed;
  std::vector<LayerWeights> layers;
  Tensor final_norm;
  Tensor lm_head;
  cpu::EmbeddingRowGradient* embed_rows = nullptr;  // not owned
};

// Binds the views of `store` by name (for an adapter store, only the
// adapters: lora_store.h). CHECK-fails on a store that does not
// match its config (a programming error).
ModelTensors BindModelTensors(const ParameterStore& store);

// Binds the fields of `out` that belong to group `group` of `layout` to views
// over `memory`, [padded] elements of any dtype with that group's layout
// (the ZeRO-2 gradient cache in f32, a ZeRO-3 gathered group in the compute
// dtype). `layout` may be a layout-only store, except for LoRA adapters.
void BindGroupTensors(const ParameterStore& layout, int group, const Tensor& memory,
                      ModelTensors& out);

// Copies host tensors (e.g. loaded from safetensors) into `store` by name;
// every tensor of the store must be given with the right shape.
absl::Status CopyIntoStore(const std::vector<std::pair<std::string, Tensor>>& named,
                           ParameterStore& store);

}  // namespace sbp
