// Model configuration in Hugging Face terms (config.json of Qwen3ForCausalLM,
// LlamaForCausalLM, Qwen2ForCausalLM), named presets, and the parameter layout
// (names, shapes and order exactly as Hugging Face stores them).
//
// Supported: dense decoder-only models with RMSNorm, SwiGLU (silu) MLP without
// bias, RoPE plain or scaled (linear, llama3, yarn: rope_scaling.h) and full
// causal attention (no sliding window). Qwen2 always has q/k/v bias; Qwen3 has
// per-head q/k RMSNorm. Anything else (MoE, dynamic/longrope RoPE, partial
// rotary, sliding window, mlp_bias, attention_bias on Llama/Qwen3, which in
// Hugging Face also puts a bias on o_proj) is rejected when parsed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/rope_table.h"
#include "kernels/tensor.h"
#include "worker/model/rope_scaling.h"

namespace sbp {

enum class Architecture : uint8_t { kQwen3, kLlama, kQwen2 };

// "Qwen3ForCausalLM", "LlamaForCausalLM", "Qwen2ForCausalLM".
absl::string_view ArchitectureClassName(Architecture architecture);
// "qwen3", "llama", "qwen2" (config.json `model_type`).
absl::string_view ArchitectureModelType(Architecture architecture);

struct ModelConfig {
  Architecture architecture = Architecture::kQwen3;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;          // H
  int64_t intermediate_size = 0;    // I
  int64_t num_hidden_layers = 0;    // L
  int64_t num_attention_heads = 0;  // Hq
  int64_t num_key_value_heads = 0;  // Hkv, divides Hq
  int64_t head_dim = 0;             // d (need not be H / Hq)
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;  // default: plain RoPE
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // bias on q/k/v projections (Qwen2: always)
  bool qk_norm = false;         // per-head RMSNorm of q and k (Qwen3: always)
  int64_t max_position_embeddings = 0;
  std::string torch_dtype = "float32";  // "float32", "bfloat16", "float16"
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // config.json allows one id or a list

  int64_t q_dim() const { return num_attention_heads * head_dim; }   // Hq*d
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }  // Hkv*d
  // The RoPE kernels' table (inverse frequencies, attention scaling).
  RopeTable rope_table() const { return ComputeRopeTable(rope_scaling, rope_theta, head_dim); }

  bool operator==(const ModelConfig&) const = default;
};

// Largest config.json read (Hugging Face's are a few KiB).
inline constexpr int64_t kMaxModelConfigBytes = int64_t{1} << 20;

// Parses config.json text. `source_name` prefixes every error message
// ("config.json: field 'hidden_size' must be positive (got 0)"). Every error
// is InvalidArgument: text over kMaxModelConfigBytes or nested deeper than
// kMaxInputNestingDepth (checked before parsing), malformed JSON (with the
// parser's byte position), wrong types, sizes out of bounds (each size has a
// ceiling, and the parameter count must stay under 2^42), inconsistent
// sizes, or a feature this runtime does not support.
// Fields Hugging Face defaults are defaulted the same way (head_dim: 128 for
// Qwen3, hidden/heads otherwise; rope_theta 10000; rms_norm_eps 1e-6). RoPE
// settings are read as ParseRopeSettings (rope_scaling.h) describes.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text,
                                             absl::string_view source_name);
// Reads and parses a config.json file: NotFound when it does not exist;
// InvalidArgument, before anything is read, when it is not a regular file
// (a FIFO, a device, a directory) or has more than kMaxModelConfigBytes.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// Checks the invariants ParseModelConfig enforces (sizes positive and within
// their bounds, the parameter count, GQA divisibility, architecture-implied
// flags); for configs built in code.
absl::Status ValidateModelConfig(const ModelConfig& config, absl::string_view source_name);

// config.json text that Hugging Face transformers (4.5x and 5.x) loads into
// the matching *ForCausalLM class with the same hyper-parameters.
std::string ModelConfigToJson(const ModelConfig& config);

// Named presets: tiny-qwen3, tiny-llama, tiny-qwen2, bench-qwen3, qwen3-0.6b,
// qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, qwen3-32b, llama3.1-8b,
// llama3.2-1b, llama3.2-3b (the published shapes, with llama3 RoPE scaling).
// NotFound (listing the names) otherwise.
absl::StatusOr<ModelConfig> PresetConfig(absl::string_view name);
std::vector<std::string> PresetNames();

// What a parameter is, for initialisation and weight-decay decisions.
enum class ParamKind : uint8_t {
  kEmbedding,  // model.embed_tokens.weight
  kLinear,     // projection weights [out, in]
  kBias,       // q/k/v biases
  kNorm,       // RMSNorm weights (layer norms, q/k norms, final norm)
  kLmHead,     // lm_head.weight (untied models only)
};

// AdamW's weight decay for a parameter: none for norms and biases, as Hugging
// Face's Trainer does.
inline double WeightDecayFor(ParamKind kind, double weight_decay) {
  return kind == ParamKind::kNorm || kind == ParamKind::kBias ? 0.0 : weight_decay;
}

struct ParamSpec {
  std::string name;  // Hugging Face name, "model.layers.3.self_attn.q_proj.weight"
  Shape shape;
  ParamKind kind = ParamKind::kLinear;
  int layer = -1;  // decoder layer index, -1 for embedding / final norm / lm_head
};

// Every parameter in Hugging Face order: embedding, layers 0..L-1 (see
// LayerParameterSpecs), model.norm.weight, lm_head.weight unless tied.
std::vector<ParamSpec> ParameterSpecs(const ModelConfig& config);
// The parameters of decoder layer `layer` in order: input_layernorm, q_proj
// (+bias), k_proj (+bias), v_proj (+bias), o_proj, q_norm, k_norm (qk_norm),
// post_attention_layernorm, gate_proj, up_proj, down_proj. The engine keeps
// them, in this order, in one flat per-layer buffer.
std::vector<ParamSpec> LayerParameterSpecs(const ModelConfig& config, int layer);
// model.embed_tokens.weight.
std::vector<ParamSpec> EmbeddingParameterSpecs(const ModelConfig& config);
// model.norm.weight, then lm_head.weight unless tied.
std::vector<ParamSpec> FinalParameterSpecs(const ModelConfig& config);

// Sum of the elements of `specs`.
int64_t TotalElements(const std::vector<ParamSpec>& specs);
// Number of distinct parameters (a tied LM head counts once).
int64_t ParameterCount(const ModelConfig& config);

}  // namespace sbp
