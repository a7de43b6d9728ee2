// RoPE scaling as config.json states it (`rope_scaling`, or transformers 5's
// `rope_parameters`), and the rotary table it gives, computed exactly as
// transformers 5.24 does (modeling_rope_utils.py), but in double.
//
// With d = head_dim, theta the base and inv_i = theta^(-2i/d) for i < d/2:
//   default  inv_i; attention scaling 1.
//   linear   inv_i / factor.
//   llama3   wavelength w_i = 2 pi / inv_i, L = original_max_position_embeddings:
//            w_i < L / high_freq_factor: inv_i (high frequencies kept);
//            w_i > L / low_freq_factor:  inv_i / factor;
//            otherwise, with s = (L / w_i - low) / (high - low):
//            (1 - s) inv_i / factor + s inv_i.
//   yarn     the dimension that turns r times over L,
//            j(r) = d ln(L / (2 pi r)) / (2 ln theta), for r = beta_fast
//            (default 32) and beta_slow (default 1) gives the ramp [lo, hi]
//            (floor/ceil unless truncate is false, clamped to [0, d-1];
//            hi += 0.001 when equal); ramp_i = clamp((i - lo) / (hi - lo), 0, 1);
//            inv = (inv_i / factor) ramp_i + inv_i (1 - ramp_i): fast pairs
//            keep their frequency, slow ones are interpolated.
//            Attention scaling: attention_factor if given; else, with
//            g(m) = 1 if factor <= 1 else 0.1 m ln(factor) + 1,
//            g(mscale) / g(mscale_all_dim) when both are non-zero, else g(1).
// The attention scaling multiplies cos and sin (so q.k by its square).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/rope_table.h"
#include "nlohmann/json_fwd.hpp"

namespace sbp {

enum class RopeType : uint8_t { kDefault, kLinear, kLlama3, kYarn };

// "default", "linear", "llama3", "yarn".
absl::string_view RopeTypeName(RopeType type);

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;                           // linear, llama3, yarn
  int64_t original_max_position_embeddings = 0;  // llama3, yarn
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  // yarn, as given (absent: transformers' defaults, see above).
  std::optional<double> beta_fast;
  std::optional<double> beta_slow;
  std::optional<double> attention_factor;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  std::optional<bool> truncate;

  bool operator==(const RopeScaling&) const = default;
};

// The RoPE settings of a config.json object, chosen as transformers 5.24
// chooses them: a non-empty `rope_scaling` object wins over `rope_parameters`;
// rope_theta comes from inside that object, else the top-level `rope_theta`,
// else 10000; "rope_type" wins over the older "type"; a missing
// original_max_position_embeddings is max_position_embeddings, and a
// top-level original_max_position_embeddings overrides the object's (as
// Hugging Face's model classes apply it). Errors are InvalidArgument and
// name the field ("config.json: field 'rope_scaling.factor' must be
// positive (got 0)"); types other than default/linear/llama3/yarn are
// refused by name.
struct RopeSettings {
  double theta = 10000.0;
  RopeScaling scaling;
};
absl::StatusOr<RopeSettings> ParseRopeSettings(const nlohmann::json& root,
                                               int64_t max_position_embeddings,
                                               absl::string_view source_name);

// Checks the values ParseRopeSettings enforces, for configs built in code.
absl::Status ValidateRopeScaling(const RopeScaling& scaling, absl::string_view source_name);

// The scaling's config.json fields (without rope_theta): {"rope_type":
// "llama3", "factor": 8.0, ...}, in the order transformers writes them.
nlohmann::ordered_json RopeScalingToJson(const RopeScaling& scaling);

// The table the RoPE kernels use: d/2 inverse frequencies and the attention
// scaling, in double.
RopeTable ComputeRopeTable(const RopeScaling& scaling, double theta, int64_t head_dim);

}  // namespace sbp
