#include "worker/model/model_config.h"

#include <cctype>
#include <cmath>
#include <iterator>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/input_limits.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/model/json_describe.h"

namespace sbp {
namespace {

using Json = nlohmann::json;

// Bounds that keep every size product (and ParameterCount) inside int64; the
// planner multiplies them further by seq_len (JobSpec bounds it by 2^24).
constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxLayersOrHeads = 4096;
constexpr int64_t kMaxVocab = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxPositions = int64_t{1} << 26;
// 4.4e12 parameters (17.6 TB in f32): far beyond any dense model, far below
// int64 when multiplied by the bytes of weights, gradients and Adam moments.
constexpr int64_t kMaxParameters = int64_t{1} << 42;

// Reads typed fields of one JSON object and prefixes errors with the source.
class FieldReader {
 public:
  FieldReader(const Json& object, absl::string_view source) : object_(object), source_(source) {}

  // Present and not null.
  bool Has(absl::string_view key) const {
    auto it = object_.find(std::string(key));
    return it != object_.end() && !it->is_null();
  }
  const Json* Get(absl::string_view key) const {
    auto it = object_.find(std::string(key));
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  const Json& object() const { return object_; }
  absl::string_view source() const { return source_; }

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field '", key, "' ", what));
  }
  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", message));
  }

  absl::StatusOr<int64_t> Int(absl::string_view key, std::optional<int64_t> default_value) const {
    const Json* value = Get(key);
    if (value == nullptr) {
      if (default_value.has_value()) return *default_value;
      return Error(key, "is required");
    }
    return AsInt(key, *value);
  }

  absl::StatusOr<int64_t> AsInt(absl::string_view key, const Json& value) const {
    if (!value.is_number_integer()) {
      return Error(key, absl::StrCat("must be an integer (got ", DescribeJsonValue(value), ")"));
    }
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error(key, absl::StrCat("is too large (got ", value.dump(), ")"));
    }
    return value.get<int64_t>();
  }

  // An integer in [1, max].
  absl::StatusOr<int64_t> Size(absl::string_view key, std::optional<int64_t> default_value,
                               int64_t max) const {
    ASSIGN_OR_RETURN(int64_t value, Int(key, default_value));
    if (value <= 0) return Error(key, absl::StrCat("must be positive (got ", value, ")"));
    if (value > max) {
      return Error(key, absl::StrCat("must be at most ", max, " (got ", value, ")"));
    }
    return value;
  }

  absl::StatusOr<double> Number(absl::string_view key, double default_value) const {
    const Json* value = Get(key);
    if (value == nullptr) return default_value;
    return AsNumber(key, *value);
  }

  absl::StatusOr<double> AsNumber(absl::string_view key, const Json& value) const {
    if (!value.is_number()) {
      return Error(key, absl::StrCat("must be a number (got ", DescribeJsonValue(value), ")"));
    }
    return value.get<double>();
  }

  absl::StatusOr<bool> Bool(absl::string_view key, bool default_value) const {
    const Json* value = Get(key);
    if (value == nullptr) return default_value;
    if (!value->is_boolean()) {
      return Error(key,
                   absl::StrCat("must be true or false (got ", DescribeJsonValue(*value), ")"));
    }
    return value->get<bool>();
  }

  absl::StatusOr<std::string> String(absl::string_view key,
                                     std::optional<std::string> default_value) const {
    const Json* value = Get(key);
    if (value == nullptr) {
      if (default_value.has_value()) return *default_value;
      return Error(key, "is required");
    }
    if (!value->is_string()) {
      return Error(key, absl::StrCat("must be a string (got ", DescribeJsonValue(*value), ")"));
    }
    return value->get<std::string>();
  }

 private:
  const Json& object_;
  std::string source_;
};

struct ArchitectureNames {
  Architecture architecture;
  absl::string_view class_name;
  absl::string_view model_type;
};

constexpr ArchitectureNames kArchitectures[] = {
    {Architecture::kQwen3, "Qwen3ForCausalLM", "qwen3"},
    {Architecture::kLlama, "LlamaForCausalLM", "llama"},
    {Architecture::kQwen2, "Qwen2ForCausalLM", "qwen2"},
};

bool LooksLikeMoe(absl::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("moe") != std::string::npos;
}

absl::StatusOr<Architecture> DetectArchitecture(const FieldReader& fields) {
  std::optional<Architecture> from_class;
  std::optional<Architecture> from_type;
  std::string class_name;
  std::string model_type;
  if (const Json* list = fields.Get("architectures")) {
    if (!list->is_array()) {
      return fields.Error("architectures", absl::StrCat("must be a list of strings (got ",
                                                        DescribeJsonValue(*list), ")"));
    }
    if (!list->empty()) {
      const Json& first = list->front();
      if (!first.is_string()) {
        return fields.Error("architectures", absl::StrCat("must be a list of strings (got an "
                                                          "element ",
                                                          DescribeJsonValue(first), ")"));
      }
      class_name = first.get<std::string>();
      for (const ArchitectureNames& a : kArchitectures) {
        if (class_name == a.class_name) from_class = a.architecture;
      }
      if (!from_class.has_value()) {
        if (LooksLikeMoe(class_name)) {
          return fields.Error(absl::StrCat("architecture '", class_name,
                                           "' is a mixture-of-experts model, which is not "
                                           "supported"));
        }
        return fields.Error(
            absl::StrCat("unsupported architecture '", class_name,
                         "' (supported: Qwen3ForCausalLM, LlamaForCausalLM, Qwen2ForCausalLM)"));
      }
    }
  }
  if (fields.Has("model_type")) {
    ASSIGN_OR_RETURN(model_type, fields.String("model_type", std::nullopt));
    for (const ArchitectureNames& a : kArchitectures) {
      if (model_type == a.model_type) from_type = a.architecture;
    }
    if (!from_type.has_value()) {
      if (LooksLikeMoe(model_type)) {
        return fields.Error(absl::StrCat("model_type '", model_type,
                                         "' is a mixture-of-experts model, which is not "
                                         "supported"));
      }
      if (!from_class.has_value()) {
        return fields.Error(absl::StrCat("unsupported model_type '", model_type,
                                         "' (supported: qwen3, llama, qwen2)"));
      }
    }
  }
  if (from_class.has_value() && from_type.has_value() && *from_class != *from_type) {
    return fields.Error(
        absl::StrCat("architectures says '", class_name, "' but model_type is '", model_type, "'"));
  }
  if (from_class.has_value()) return *from_class;
  if (from_type.has_value()) return *from_type;
  return fields.Error("neither 'architectures' nor 'model_type' names the model class");
}

absl::Status CheckUnsupported(const FieldReader& fields, Architecture architecture) {
  for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"}) {
    if (const Json* value = fields.Get(key)) {
      ASSIGN_OR_RETURN(int64_t experts, fields.AsInt(key, *value));
      if (experts > 0) {
        return fields.Error(
            key, absl::StrCat("is ", experts, ": mixture-of-experts models are not supported"));
      }
    }
  }
  ASSIGN_OR_RETURN(bool sliding, fields.Bool("use_sliding_window", false));
  if (sliding) {
    return fields.Error("use_sliding_window", "is true: sliding-window attention is not supported");
  }
  if (const Json* layer_types = fields.Get("layer_types")) {
    if (!layer_types->is_array()) {
      return fields.Error("layer_types", absl::StrCat("must be a list (got ",
                                                      DescribeJsonValue(*layer_types), ")"));
    }
    for (size_t i = 0; i < layer_types->size(); ++i) {
      const Json& type = (*layer_types)[i];
      if (!type.is_string() || type.get<std::string>() != "full_attention") {
        return fields.Error("layer_types",
                            absl::StrCat("has ", DescribeJsonValue(type), " at index ", i,
                                         ": only 'full_attention' layers are supported"));
      }
    }
  }
  ASSIGN_OR_RETURN(bool mlp_bias, fields.Bool("mlp_bias", false));
  if (mlp_bias) return fields.Error("mlp_bias", "is true: MLP biases are not supported");
  ASSIGN_OR_RETURN(std::string act, fields.String("hidden_act", "silu"));
  if (act != "silu" && act != "swish") {
    return fields.Error("hidden_act",
                        absl::StrCat("is '", act, "': only 'silu' (SwiGLU MLP) is supported"));
  }
  if (architecture != Architecture::kQwen2) {
    ASSIGN_OR_RETURN(bool bias, fields.Bool("attention_bias", false));
    if (bias) {
      return fields.Error("attention_bias",
                          absl::StrCat("is true: ", ArchitectureClassName(architecture),
                                       " then also has an o_proj bias, which is not supported"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseFields(const FieldReader& fields) {
  ModelConfig c;
  ASSIGN_OR_RETURN(c.architecture, DetectArchitecture(fields));
  RETURN_IF_ERROR(CheckUnsupported(fields, c.architecture));
  const bool is_llama = c.architecture == Architecture::kLlama;

  ASSIGN_OR_RETURN(c.vocab_size, fields.Size("vocab_size", std::nullopt, kMaxVocab));
  ASSIGN_OR_RETURN(c.hidden_size, fields.Size("hidden_size", std::nullopt, kMaxDim));
  ASSIGN_OR_RETURN(c.intermediate_size, fields.Size("intermediate_size", std::nullopt, kMaxDim));
  ASSIGN_OR_RETURN(c.num_hidden_layers,
                   fields.Size("num_hidden_layers", std::nullopt, kMaxLayersOrHeads));
  ASSIGN_OR_RETURN(c.num_attention_heads,
                   fields.Size("num_attention_heads", std::nullopt, kMaxLayersOrHeads));
  // Hugging Face: Llama treats an absent value as multi-head attention; the
  // Qwen classes would silently use 32, so there it must be given.
  ASSIGN_OR_RETURN(
      c.num_key_value_heads,
      fields.Size("num_key_value_heads",
                  is_llama ? std::optional<int64_t>(c.num_attention_heads) : std::nullopt,
                  kMaxLayersOrHeads));
  if (!fields.Has("head_dim")) {
    if (c.architecture == Architecture::kQwen3) {
      c.head_dim = 128;  // Qwen3Config's default
    } else if (c.hidden_size % c.num_attention_heads != 0) {
      return fields.Error(absl::StrCat("field 'head_dim' is absent and hidden_size ", c.hidden_size,
                                       " is not divisible by num_attention_heads ",
                                       c.num_attention_heads));
    } else {
      c.head_dim = c.hidden_size / c.num_attention_heads;
    }
  } else {
    ASSIGN_OR_RETURN(c.head_dim, fields.Size("head_dim", std::nullopt, kMaxDim));
  }
  ASSIGN_OR_RETURN(c.rms_norm_eps, fields.Number("rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, fields.Bool("tie_word_embeddings", false));
  c.attention_bias = c.architecture == Architecture::kQwen2;
  c.qk_norm = c.architecture == Architecture::kQwen3;
  ASSIGN_OR_RETURN(c.max_position_embeddings,
                   fields.Size("max_position_embeddings", is_llama ? 2048 : 32768, kMaxPositions));
  // rope_theta and the scaling: top level, rope_scaling or (transformers 5) rope_parameters.
  ASSIGN_OR_RETURN(RopeSettings rope,
                   ParseRopeSettings(fields.object(), c.max_position_embeddings, fields.source()));
  c.rope_theta = rope.theta;
  c.rope_scaling = rope.scaling;
  // transformers >= 4.56 writes "dtype", older versions "torch_dtype".
  if (fields.Has("dtype")) {
    ASSIGN_OR_RETURN(c.torch_dtype, fields.String("dtype", std::nullopt));
  } else {
    ASSIGN_OR_RETURN(c.torch_dtype, fields.String("torch_dtype", "float32"));
  }
  if (const Json* bos = fields.Get("bos_token_id")) {
    ASSIGN_OR_RETURN(c.bos_token_id, fields.AsInt("bos_token_id", *bos));
  }
  if (const Json* eos = fields.Get("eos_token_id")) {
    if (eos->is_array()) {
      for (const Json& id : *eos) {
        ASSIGN_OR_RETURN(int64_t value, fields.AsInt("eos_token_id", id));
        c.eos_token_ids.push_back(value);
      }
    } else {
      ASSIGN_OR_RETURN(int64_t value, fields.AsInt("eos_token_id", *eos));
      c.eos_token_ids.push_back(value);
    }
  }
  return c;
}

ModelConfig TinyShape(Architecture architecture) {
  ModelConfig c;
  c.architecture = architecture;
  c.vocab_size = 256;
  c.hidden_size = 64;
  c.intermediate_size = 192;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 32768;
  c.torch_dtype = "float32";
  c.qk_norm = architecture == Architecture::kQwen3;
  c.attention_bias = architecture == Architecture::kQwen2;
  return c;
}

ModelConfig Qwen3Shape(int64_t vocab, int64_t hidden, int64_t layers, int64_t heads,
                       int64_t kv_heads, int64_t head_dim, int64_t intermediate, bool tied) {
  ModelConfig c;
  c.architecture = Architecture::kQwen3;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = tied;
  c.qk_norm = true;
  c.max_position_embeddings = 40960;
  c.torch_dtype = "bfloat16";
  c.bos_token_id = 151643;
  c.eos_token_ids = {151645};
  return c;
}

// Llama 3.1 / 3.2 as published (meta-llama/Llama-3.x-*-Instruct config.json):
// vocab 128256, theta 500000, llama3 RoPE scaling over 8192 positions
// (low 1, high 4) up to 131072.
ModelConfig Llama3Shape(int64_t hidden, int64_t layers, int64_t heads, int64_t head_dim,
                        int64_t intermediate, bool tied, double rope_factor) {
  ModelConfig c;
  c.architecture = Architecture::kLlama;
  c.vocab_size = 128256;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = 8;
  c.head_dim = head_dim;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeType::kLlama3;
  c.rope_scaling.factor = rope_factor;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  c.tie_word_embeddings = tied;
  c.max_position_embeddings = 131072;
  c.torch_dtype = "bfloat16";
  c.bos_token_id = 128000;
  c.eos_token_ids = {128001, 128008, 128009};
  return c;
}

std::vector<std::pair<std::string, ModelConfig>> Presets() {
  std::vector<std::pair<std::string, ModelConfig>> presets;
  ModelConfig qwen3 = TinyShape(Architecture::kQwen3);
  qwen3.rope_theta = 1e6;
  qwen3.rms_norm_eps = 1e-6;
  presets.emplace_back("tiny-qwen3", qwen3);
  ModelConfig llama = TinyShape(Architecture::kLlama);
  llama.tie_word_embeddings = true;
  llama.rope_theta = 10000.0;
  llama.rms_norm_eps = 1e-5;
  presets.emplace_back("tiny-llama", llama);
  ModelConfig qwen2 = TinyShape(Architecture::kQwen2);
  qwen2.rope_theta = 1e6;
  qwen2.rms_norm_eps = 1e-6;
  presets.emplace_back("tiny-qwen2", qwen2);
  ModelConfig bench = Qwen3Shape(151936, 512, 4, 8, 4, 64, 1536, /*tied=*/false);
  bench.torch_dtype = "float32";
  bench.max_position_embeddings = 131072;
  presets.emplace_back("bench-qwen3", bench);
  presets.emplace_back("qwen3-0.6b", Qwen3Shape(151936, 1024, 28, 16, 8, 128, 3072, true));
  presets.emplace_back("qwen3-1.7b", Qwen3Shape(151936, 2048, 28, 16, 8, 128, 6144, true));
  presets.emplace_back("qwen3-4b", Qwen3Shape(151936, 2560, 36, 32, 8, 128, 9728, true));
  presets.emplace_back("qwen3-8b", Qwen3Shape(151936, 4096, 36, 32, 8, 128, 12288, false));
  presets.emplace_back("qwen3-14b", Qwen3Shape(151936, 5120, 40, 40, 8, 128, 17408, false));
  presets.emplace_back("qwen3-32b", Qwen3Shape(151936, 5120, 64, 64, 8, 128, 25600, false));
  presets.emplace_back("llama3.1-8b", Llama3Shape(4096, 32, 32, 128, 14336, false, 8.0));
  presets.emplace_back("llama3.2-1b", Llama3Shape(2048, 16, 32, 64, 8192, true, 32.0));
  presets.emplace_back("llama3.2-3b", Llama3Shape(3072, 28, 24, 128, 8192, true, 32.0));
  return presets;
}

std::string LayerPrefix(int layer) { return absl::StrCat("model.layers.", layer, "."); }

// ParameterCount with every product and sum checked for int64 overflow.
absl::StatusOr<int64_t> CheckedParameterCount(const ModelConfig& c) {
  bool overflow = false;
  auto mul = [&](int64_t a, int64_t b) {
    int64_t r = 0;
    overflow = overflow || __builtin_mul_overflow(a, b, &r);
    return r;
  };
  auto add = [&](int64_t a, int64_t b) {
    int64_t r = 0;
    overflow = overflow || __builtin_add_overflow(a, b, &r);
    return r;
  };
  const int64_t h = c.hidden_size;
  const int64_t q_dim = mul(c.num_attention_heads, c.head_dim);
  const int64_t kv_dim = mul(c.num_key_value_heads, c.head_dim);
  int64_t layer = mul(2, h);                                // input/post-attention norms
  layer = add(layer, mul(mul(2, q_dim), h));                // q_proj, o_proj
  layer = add(layer, mul(mul(2, kv_dim), h));               // k_proj, v_proj
  layer = add(layer, mul(mul(3, c.intermediate_size), h));  // gate, up, down
  if (c.attention_bias) layer = add(layer, add(q_dim, mul(2, kv_dim)));
  if (c.qk_norm) layer = add(layer, mul(2, c.head_dim));
  const int64_t embedding = mul(c.vocab_size, h);
  int64_t total = add(mul(layer, c.num_hidden_layers), add(embedding, h));
  if (!c.tie_word_embeddings) total = add(total, embedding);
  if (overflow) return absl::OutOfRangeError("parameter count overflows int64");
  return total;
}

}  // namespace

absl::string_view ArchitectureClassName(Architecture architecture) {
  for (const ArchitectureNames& a : kArchitectures) {
    if (a.architecture == architecture) return a.class_name;
  }
  return "?";
}

absl::string_view ArchitectureModelType(Architecture architecture) {
  for (const ArchitectureNames& a : kArchitectures) {
    if (a.architecture == architecture) return a.model_type;
  }
  return "?";
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text,
                                             absl::string_view source_name) {
  if (json_text.size() > static_cast<size_t>(kMaxModelConfigBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": has ", json_text.size(), " bytes, over the ",
                     LimitText(kMaxModelConfigBytes), " limit for config.json"));
  }
  // Before parsing: nested values are copied and printed recursively.
  RETURN_IF_ERROR(CheckJsonNesting(json_text, kMaxInputNestingDepth, source_name));
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": malformed JSON at byte ", e.byte, ": ", e.what()));
  } catch (const Json::exception& e) {  // e.g. a number too large for a double
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": malformed JSON: ", e.what()));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source_name, ": expected a JSON object at the top level (got ", root.type_name(), ")"));
  }
  FieldReader fields(root, source_name);
  ASSIGN_OR_RETURN(ModelConfig config, ParseFields(fields));
  RETURN_IF_ERROR(ValidateModelConfig(config, source_name));
  return config;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadRegularFile(path, kMaxModelConfigBytes, "config.json"));
  return ParseModelConfig(text, path);
}

absl::Status ValidateModelConfig(const ModelConfig& c, absl::string_view source_name) {
  auto error = [&](absl::string_view field, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": field '", field, "' ", what));
  };
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"max_position_embeddings", c.max_position_embeddings},
  };
  for (const auto& [name, value] : sizes) {
    if (value <= 0) return error(name, absl::StrCat("must be positive (got ", value, ")"));
  }
  const std::pair<const char*, int64_t> limits[] = {
      {"vocab_size", kMaxVocab},
      {"hidden_size", kMaxDim},
      {"intermediate_size", kMaxDim},
      {"num_hidden_layers", kMaxLayersOrHeads},
      {"num_attention_heads", kMaxLayersOrHeads},
      {"num_key_value_heads", kMaxLayersOrHeads},
      {"head_dim", kMaxDim},
      {"max_position_embeddings", kMaxPositions},
  };
  for (size_t i = 0; i < std::size(limits); ++i) {
    if (sizes[i].second > limits[i].second) {
      return error(sizes[i].first, absl::StrCat("must be at most ", limits[i].second, " (got ",
                                                sizes[i].second, ")"));
    }
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return error("num_key_value_heads",
                 absl::StrCat("must divide num_attention_heads (got ", c.num_key_value_heads,
                              " and ", c.num_attention_heads, ")"));
  }
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps)) {
    return error("rms_norm_eps",
                 absl::StrCat("must be a positive number (got ", c.rms_norm_eps, ")"));
  }
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) {
    return error("rope_theta", absl::StrCat("must be a positive number (got ", c.rope_theta, ")"));
  }
  if (c.head_dim % 2 != 0) {
    return error("head_dim", absl::StrCat("must be even for RoPE (got ", c.head_dim, ")"));
  }
  // q and k/v rows are one BLAS dimension each (int). Both factors are
  // bounded above, so the products cannot overflow int64.
  if (c.q_dim() > INT32_MAX) {
    return error("head_dim", absl::StrCat("times num_attention_heads is ", c.q_dim(),
                                          ", over the 2^31 - 1 of one matrix dimension"));
  }
  RETURN_IF_ERROR(ValidateRopeScaling(c.rope_scaling, source_name));
  if (c.qk_norm != (c.architecture == Architecture::kQwen3)) {
    return error("qk_norm", "must be set exactly for Qwen3");
  }
  if (c.architecture == Architecture::kQwen2 && !c.attention_bias) {
    return error("attention_bias", "must be true for Qwen2 (q/k/v projections have biases)");
  }
  if (c.architecture != Architecture::kQwen2 && c.attention_bias) {
    return error("attention_bias",
                 absl::StrCat("is true: ", ArchitectureClassName(c.architecture),
                              " then also has an o_proj bias, which is not supported"));
  }
  // Every size is bounded now, so these products cannot overflow; the check
  // is still done with overflow-checked arithmetic.
  const absl::StatusOr<int64_t> count = CheckedParameterCount(c);
  if (!count.ok() || *count > kMaxParameters) {
    return absl::InvalidArgumentError(absl::StrCat(
        source_name, ": the model would have ",
        count.ok() ? absl::StrCat(*count) : std::string("more than 2^63"),
        " parameters, over the limit of ", kMaxParameters,
        " (check vocab_size, hidden_size, intermediate_size, num_hidden_layers and the heads)"));
  }
  // bos/eos ids are informational (generation only) and not range-checked.
  return absl::OkStatus();
}

std::string ModelConfigToJson(const ModelConfig& c) {
  using Ordered = nlohmann::ordered_json;
  const bool qwen = c.architecture != Architecture::kLlama;
  Ordered j;
  j["architectures"] = Ordered::array({std::string(ArchitectureClassName(c.architecture))});
  j["model_type"] = std::string(ArchitectureModelType(c.architecture));
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["initializer_range"] = 0.02;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  // transformers 4.x reads rope_scaling (and the top-level rope_theta); 5.x
  // takes a non-empty rope_scaling, else rope_parameters with rope_theta inside.
  Ordered rope = RopeScalingToJson(c.rope_scaling);
  if (c.rope_scaling.type == RopeType::kDefault) {
    j["rope_scaling"] = nullptr;
  } else {
    j["rope_scaling"] = rope;
  }
  rope["rope_theta"] = c.rope_theta;
  j["rope_parameters"] = rope;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.architecture != Architecture::kQwen2) j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  if (c.architecture == Architecture::kLlama) {
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  }
  if (qwen) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = c.num_hidden_layers;
    j["layer_types"] = Ordered(std::vector<std::string>(c.num_hidden_layers, "full_attention"));
  }
  if (c.bos_token_id.has_value()) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else if (!c.eos_token_ids.empty()) {
    j["eos_token_id"] = c.eos_token_ids;
  }
  j["use_cache"] = true;
  j["torch_dtype"] = c.torch_dtype;
  j["dtype"] = c.torch_dtype;
  return j.dump(2) + "\n";
}

absl::StatusOr<ModelConfig> PresetConfig(absl::string_view name) {
  for (auto& [preset, config] : Presets()) {
    if (preset == name) return config;
  }
  return absl::NotFoundError(absl::StrCat("unknown model preset '", name,
                                          "' (known: ", absl::StrJoin(PresetNames(), ", "), ")"));
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (auto& [preset, config] : Presets()) names.push_back(preset);
  return names;
}

std::vector<ParamSpec> EmbeddingParameterSpecs(const ModelConfig& c) {
  return {{"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, ParamKind::kEmbedding, -1}};
}

std::vector<ParamSpec> LayerParameterSpecs(const ModelConfig& c, int layer) {
  CHECK(layer >= 0 && layer < c.num_hidden_layers) << "layer " << layer;
  const std::string p = LayerPrefix(layer);
  const int64_t h = c.hidden_size;
  std::vector<ParamSpec> specs;
  auto add = [&](absl::string_view name, Shape shape, ParamKind kind) {
    specs.push_back({absl::StrCat(p, name), std::move(shape), kind, layer});
  };
  add("input_layernorm.weight", {h}, ParamKind::kNorm);
  add("self_attn.q_proj.weight", {c.q_dim(), h}, ParamKind::kLinear);
  if (c.attention_bias) add("self_attn.q_proj.bias", {c.q_dim()}, ParamKind::kBias);
  add("self_attn.k_proj.weight", {c.kv_dim(), h}, ParamKind::kLinear);
  if (c.attention_bias) add("self_attn.k_proj.bias", {c.kv_dim()}, ParamKind::kBias);
  add("self_attn.v_proj.weight", {c.kv_dim(), h}, ParamKind::kLinear);
  if (c.attention_bias) add("self_attn.v_proj.bias", {c.kv_dim()}, ParamKind::kBias);
  add("self_attn.o_proj.weight", {h, c.q_dim()}, ParamKind::kLinear);
  if (c.qk_norm) {
    add("self_attn.q_norm.weight", {c.head_dim}, ParamKind::kNorm);
    add("self_attn.k_norm.weight", {c.head_dim}, ParamKind::kNorm);
  }
  add("post_attention_layernorm.weight", {h}, ParamKind::kNorm);
  add("mlp.gate_proj.weight", {c.intermediate_size, h}, ParamKind::kLinear);
  add("mlp.up_proj.weight", {c.intermediate_size, h}, ParamKind::kLinear);
  add("mlp.down_proj.weight", {h, c.intermediate_size}, ParamKind::kLinear);
  return specs;
}

std::vector<ParamSpec> FinalParameterSpecs(const ModelConfig& c) {
  std::vector<ParamSpec> specs = {{"model.norm.weight", {c.hidden_size}, ParamKind::kNorm, -1}};
  if (!c.tie_word_embeddings) {
    specs.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}, ParamKind::kLmHead, -1});
  }
  return specs;
}

std::vector<ParamSpec> ParameterSpecs(const ModelConfig& c) {
  std::vector<ParamSpec> specs = EmbeddingParameterSpecs(c);
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (ParamSpec& spec : LayerParameterSpecs(c, layer)) specs.push_back(std::move(spec));
  }
  for (ParamSpec& spec : FinalParameterSpecs(c)) specs.push_back(std::move(spec));
  return specs;
}

int64_t TotalElements(const std::vector<ParamSpec>& specs) {
  int64_t total = 0;
  for (const ParamSpec& spec : specs) total += NumElements(spec.shape);
  return total;
}

int64_t ParameterCount(const ModelConfig& config) { return TotalElements(ParameterSpecs(config)); }

}  // namespace sbp
