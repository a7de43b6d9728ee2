// LoRA adapters as a ParameterStore: the trainable parameters of a LoRA run.
// The groups follow the model's numbering (embed 0, layer i at 1 + i, final
// L + 1) so that the gradient sink, ZeRO-2 and the optimizer treat them like
// any store; the embed and final groups hold no tensor. Tensor names are
// PEFT's (`base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight`),
// so the store is what adapter_model.safetensors holds. Values are f32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/engine/lora_options.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_config.h"

namespace sbp {

// PEFT's key of layer `layer`'s adapter on `module` ("q_proj"), matrix A or B.
std::string PeftAdapterKey(int layer, absl::string_view module, bool matrix_a);

// [in, out] of the linear layer `module` of `config`'s decoder layers.
std::pair<int64_t, int64_t> LoraModuleShape(const ModelConfig& config, absl::string_view module);

// A zero-filled adapter store (`pad_multiple` as for ParameterStore).
absl::StatusOr<ParameterStore> CreateLoraStore(const ModelConfig& config,
                                               const LoraOptions& options, Allocator& allocator,
                                               absl::string_view what, int64_t pad_multiple = 1);

// PEFT's initialisation on a host store: A like nn.Linear's default
// (kaiming-uniform with a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B = 0.
// Adapter tensor i (in store order) draws from HashIndex(init_seed, i).
void InitLoraWeights(ParameterStore& adapters);

// The adapters of `store` bound into layers[i].lora (base tensors undefined),
// with the scale of its options.
ModelTensors BindAdapterTensors(const ParameterStore& store);

// Copies the adapter views of `adapters` into `weights` (the frozen base).
void AttachAdapters(const ParameterStore& adapters, ModelTensors& weights);

// The largest adapter rank in `tensors` (0: no adapter).
int64_t LoraRank(const ModelTensors& tensors);

// Elements of every adapter (A and B) in `tensors`.
int64_t AdapterParameterCount(const ModelTensors& tensors);

// Model FLOPs of one LoRA forward + backward over `tokens`: TrainingFlops
// plus tokens * LoraFlopsPerTokenChange (TrainingFlops without adapters).
double LoraTrainingFlops(const ModelConfig& config, const ModelTensors& weights, int64_t tokens);
// What LoRA changes per token: no gradients for the frozen weights
// (-2 * matmul parameters), 6 * adapter parameters more; 0 without adapters.
double LoraFlopsPerTokenChange(const ModelConfig& config, const ModelTensors& weights);

}  // namespace sbp
