#include "worker/model/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/model/json_describe.h"

namespace sbp {
namespace {

using Json = nlohmann::json;

// Same bound as max_position_embeddings (model_config.cc).
constexpr int64_t kMaxOriginalPositions = int64_t{1} << 26;

// Reads the fields of one RoPE object; errors name "<object>.<field>".
class RopeFields {
 public:
  RopeFields(const Json& object, absl::string_view object_name, absl::string_view source)
      : object_(object), object_name_(object_name), source_(source) {}

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": field '", object_name_, ".", key, "' ", what));
  }
  absl::Status ObjectError(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field '", object_name_, "' ", what));
  }

  bool Present(absl::string_view key) const { return object_.contains(std::string(key)); }
  // Present and not null.
  const Json* Get(absl::string_view key) const {
    auto it = object_.find(std::string(key));
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  absl::StatusOr<std::optional<double>> OptionalNumber(absl::string_view key) const {
    const Json* value = Get(key);
    if (value == nullptr) return std::optional<double>();
    if (!value->is_number()) {
      return Error(key, absl::StrCat("must be a number (got ", DescribeJsonValue(*value), ")"));
    }
    const double number = value->get<double>();
    if (!std::isfinite(number)) return Error(key, "must be finite");
    return std::optional<double>(number);
  }

  absl::StatusOr<double> RequiredNumber(absl::string_view key, absl::string_view type) const {
    ASSIGN_OR_RETURN(std::optional<double> value, OptionalNumber(key));
    if (!value.has_value())
      return Error(key, absl::StrCat("is required for rope_type '", type, "'"));
    return *value;
  }

  absl::StatusOr<double> Positive(absl::string_view key, double value) const {
    if (!(value > 0)) return Error(key, absl::StrCat("must be positive (got ", value, ")"));
    return value;
  }

  absl::StatusOr<std::optional<int64_t>> OptionalPositions(absl::string_view key) const {
    const Json* value = Get(key);
    if (value == nullptr) return std::optional<int64_t>();
    if (!value->is_number_integer()) {
      return Error(key, absl::StrCat("must be an integer (got ", DescribeJsonValue(*value), ")"));
    }
    if (value->is_number_unsigned() ? value->get<uint64_t>() > kMaxOriginalPositions
                                    : value->get<int64_t>() > kMaxOriginalPositions) {
      return Error(key, absl::StrCat("must be at most ", kMaxOriginalPositions, " (got ",
                                     value->dump(), ")"));
    }
    const int64_t positions = value->get<int64_t>();
    if (positions <= 0) return Error(key, absl::StrCat("must be positive (got ", positions, ")"));
    return std::optional<int64_t>(positions);
  }

  absl::StatusOr<std::optional<bool>> OptionalBool(absl::string_view key) const {
    const Json* value = Get(key);
    if (value == nullptr) return std::optional<bool>();
    if (!value->is_boolean()) {
      return Error(key,
                   absl::StrCat("must be true or false (got ", DescribeJsonValue(*value), ")"));
    }
    return std::optional<bool>(value->get<bool>());
  }

 private:
  const Json& object_;
  std::string object_name_;
  std::string source_;
};

absl::StatusOr<RopeType> ParseType(const RopeFields& fields) {
  // transformers: rope_type, else the older "type", else default.
  std::string name = "default";
  for (const char* key : {"type", "rope_type"}) {
    if (const Json* value = fields.Get(key)) {
      if (!value->is_string()) {
        return fields.Error(key,
                            absl::StrCat("must be a string (got ", DescribeJsonValue(*value), ")"));
      }
      name = value->get<std::string>();
    }
  }
  for (RopeType type :
       {RopeType::kDefault, RopeType::kLinear, RopeType::kLlama3, RopeType::kYarn}) {
    if (name == RopeTypeName(type)) return type;
  }
  return fields.ObjectError(absl::StrCat("has rope_type '", name,
                                         "', which is not supported (supported: default, linear, "
                                         "llama3, yarn)"));
}

absl::Status ParseLlama3(const RopeFields& f, RopeScaling& s) {
  ASSIGN_OR_RETURN(s.factor, f.RequiredNumber("factor", "llama3"));
  ASSIGN_OR_RETURN(s.factor, f.Positive("factor", s.factor));
  ASSIGN_OR_RETURN(s.low_freq_factor, f.RequiredNumber("low_freq_factor", "llama3"));
  ASSIGN_OR_RETURN(s.low_freq_factor, f.Positive("low_freq_factor", s.low_freq_factor));
  ASSIGN_OR_RETURN(s.high_freq_factor, f.RequiredNumber("high_freq_factor", "llama3"));
  if (!(s.high_freq_factor > s.low_freq_factor)) {
    return f.Error("high_freq_factor",
                   absl::StrCat("must be greater than low_freq_factor (got ", s.high_freq_factor,
                                " and ", s.low_freq_factor, ")"));
  }
  return absl::OkStatus();
}

absl::Status ParseYarn(const RopeFields& f, int64_t max_position_embeddings, RopeScaling& s) {
  // transformers requires the key; null means max_position_embeddings / original.
  if (!f.Present("factor")) return f.Error("factor", "is required for rope_type 'yarn'");
  ASSIGN_OR_RETURN(std::optional<double> factor, f.OptionalNumber("factor"));
  s.factor = factor.has_value() ? *factor
                                : static_cast<double>(max_position_embeddings) /
                                      static_cast<double>(s.original_max_position_embeddings);
  ASSIGN_OR_RETURN(s.factor, f.Positive("factor", s.factor));
  ASSIGN_OR_RETURN(s.beta_fast, f.OptionalNumber("beta_fast"));
  ASSIGN_OR_RETURN(s.beta_slow, f.OptionalNumber("beta_slow"));
  for (const auto& [key, beta] :
       {std::pair{"beta_fast", s.beta_fast}, {"beta_slow", s.beta_slow}}) {
    if (beta.has_value() && *beta < 0) {
      return f.Error(key, absl::StrCat("must not be negative (got ", *beta, ")"));
    }
  }
  ASSIGN_OR_RETURN(s.attention_factor, f.OptionalNumber("attention_factor"));
  if (s.attention_factor.has_value()) {
    RETURN_IF_ERROR(f.Positive("attention_factor", *s.attention_factor).status());
  }
  ASSIGN_OR_RETURN(s.mscale, f.OptionalNumber("mscale"));
  ASSIGN_OR_RETURN(s.mscale_all_dim, f.OptionalNumber("mscale_all_dim"));
  ASSIGN_OR_RETURN(s.truncate, f.OptionalBool("truncate"));
  return absl::OkStatus();
}

// The object transformers uses: a non-empty rope_scaling, else rope_parameters.
absl::StatusOr<std::pair<const Json*, const char*>> ChooseRopeObject(const Json& root,
                                                                     absl::string_view source) {
  const Json* chosen = nullptr;
  const char* chosen_name = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = root.find(key);
    if (it == root.end() || it->is_null()) continue;
    if (!it->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": field '", key,
                                                     "' must be an object or null (got ",
                                                     DescribeJsonValue(*it), ")"));
    }
    if (std::string(key) == "rope_scaling" && it->empty()) continue;
    chosen = &*it;
    chosen_name = key;
  }
  return std::pair{chosen, chosen_name};
}

}  // namespace

absl::string_view RopeTypeName(RopeType type) {
  switch (type) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kLlama3:
      return "llama3";
    case RopeType::kYarn:
      return "yarn";
  }
  return "?";
}

absl::StatusOr<RopeSettings> ParseRopeSettings(const Json& root, int64_t max_position_embeddings,
                                               absl::string_view source) {
  RopeSettings settings;
  if (auto it = root.find("rope_theta"); it != root.end() && !it->is_null()) {
    if (!it->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": field 'rope_theta' must be a number (got ", DescribeJsonValue(*it), ")"));
    }
    settings.theta = it->get<double>();
  }
  ASSIGN_OR_RETURN(auto chosen, ChooseRopeObject(root, source));
  const auto [object, object_name] = chosen;
  if (object == nullptr) return settings;
  const RopeFields f(*object, object_name, source);
  ASSIGN_OR_RETURN(std::optional<double> theta, f.OptionalNumber("rope_theta"));
  if (theta.has_value()) settings.theta = *theta;
  ASSIGN_OR_RETURN(std::optional<double> partial, f.OptionalNumber("partial_rotary_factor"));
  if (partial.has_value() && *partial != 1.0) {
    return f.Error("partial_rotary_factor",
                   absl::StrCat("is ", *partial, ": partial rotary embeddings are not supported"));
  }
  RopeScaling& s = settings.scaling;
  ASSIGN_OR_RETURN(s.type, ParseType(f));
  if (s.type == RopeType::kDefault) {
    ASSIGN_OR_RETURN(std::optional<double> factor, f.OptionalNumber("factor"));
    if (factor.has_value() && *factor != 1.0) {
      return f.Error("factor", absl::StrCat("is ", *factor,
                                            " with rope_type 'default', which ignores it; name "
                                            "the scaling (linear, llama3 or yarn)"));
    }
    return settings;
  }
  if (s.type == RopeType::kLinear) {
    ASSIGN_OR_RETURN(s.factor, f.RequiredNumber("factor", "linear"));
    ASSIGN_OR_RETURN(s.factor, f.Positive("factor", s.factor));
    return settings;
  }
  // Hugging Face: a top-level original_max_position_embeddings wins, then the
  // object's, then max_position_embeddings.
  std::optional<int64_t> original;
  if (auto top = root.find("original_max_position_embeddings");
      top != root.end() && !top->is_null()) {
    if (!top->is_number_integer() || top->get<int64_t>() <= 0 ||
        top->get<int64_t>() > kMaxOriginalPositions) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": field 'original_max_position_embeddings' must be an integer in [1, ",
          kMaxOriginalPositions, "] (got ", DescribeJsonValue(*top), ")"));
    }
    original = top->get<int64_t>();
  } else {
    ASSIGN_OR_RETURN(original, f.OptionalPositions("original_max_position_embeddings"));
  }
  s.original_max_position_embeddings = original.value_or(max_position_embeddings);
  if (s.type == RopeType::kLlama3) {
    RETURN_IF_ERROR(ParseLlama3(f, s));
  } else {
    RETURN_IF_ERROR(ParseYarn(f, max_position_embeddings, s));
  }
  return settings;
}

absl::Status ValidateRopeScaling(const RopeScaling& s, absl::string_view source) {
  auto error = [&](absl::string_view field, absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": field 'rope_scaling.", field, "' ", what));
  };
  auto positive = [&](absl::string_view field, double value) {
    return value > 0 && std::isfinite(value)
               ? absl::OkStatus()
               : error(field, absl::StrCat("must be a positive number (got ", value, ")"));
  };
  if (s.type == RopeType::kDefault) return absl::OkStatus();
  RETURN_IF_ERROR(positive("factor", s.factor));
  if (s.type == RopeType::kLinear) return absl::OkStatus();
  if (s.original_max_position_embeddings <= 0 ||
      s.original_max_position_embeddings > kMaxOriginalPositions) {
    return error("original_max_position_embeddings",
                 absl::StrCat("must be in [1, ", kMaxOriginalPositions, "] (got ",
                              s.original_max_position_embeddings, ")"));
  }
  if (s.type == RopeType::kLlama3) {
    RETURN_IF_ERROR(positive("low_freq_factor", s.low_freq_factor));
    if (!(s.high_freq_factor > s.low_freq_factor) || !std::isfinite(s.high_freq_factor)) {
      return error("high_freq_factor",
                   absl::StrCat("must be greater than low_freq_factor (got ", s.high_freq_factor,
                                " and ", s.low_freq_factor, ")"));
    }
    return absl::OkStatus();
  }
  for (const auto& [field, beta] :
       {std::pair{"beta_fast", s.beta_fast}, {"beta_slow", s.beta_slow}}) {
    if (beta.has_value() && !(*beta >= 0 && std::isfinite(*beta))) {
      return error(field, absl::StrCat("must be a non-negative number (got ", *beta, ")"));
    }
  }
  if (s.attention_factor.has_value())
    RETURN_IF_ERROR(positive("attention_factor", *s.attention_factor));
  for (const auto& [field, m] :
       {std::pair{"mscale", s.mscale}, {"mscale_all_dim", s.mscale_all_dim}}) {
    if (m.has_value() && !std::isfinite(*m)) return error(field, "must be finite");
  }
  return absl::OkStatus();
}

nlohmann::ordered_json RopeScalingToJson(const RopeScaling& s) {
  nlohmann::ordered_json j;
  j["rope_type"] = std::string(RopeTypeName(s.type));
  if (s.type == RopeType::kDefault) return j;
  j["factor"] = s.factor;
  if (s.type == RopeType::kLinear) return j;
  if (s.type == RopeType::kLlama3) {
    j["low_freq_factor"] = s.low_freq_factor;
    j["high_freq_factor"] = s.high_freq_factor;
  }
  j["original_max_position_embeddings"] = s.original_max_position_embeddings;
  if (s.type == RopeType::kYarn) {
    if (s.beta_fast.has_value()) j["beta_fast"] = *s.beta_fast;
    if (s.beta_slow.has_value()) j["beta_slow"] = *s.beta_slow;
    if (s.attention_factor.has_value()) j["attention_factor"] = *s.attention_factor;
    if (s.mscale.has_value()) j["mscale"] = *s.mscale;
    if (s.mscale_all_dim.has_value()) j["mscale_all_dim"] = *s.mscale_all_dim;
    if (s.truncate.has_value()) j["truncate"] = *s.truncate;
  }
  return j;
}

namespace {

// YaRN's attention scaling g(m) = 0.1 m ln(factor) + 1 (1 for factor <= 1).
double YarnMscale(double factor, double m) {
  return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0;
}

// The (fractional) pair dimension that turns `rotations` times over `length`.
double YarnCorrectionDim(double rotations, double d, double theta, double length) {
  return d * std::log(length / (rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
}

}  // namespace

RopeTable ComputeRopeTable(const RopeScaling& s, double theta, int64_t head_dim) {
  RopeTable table = PlainRopeTable(head_dim, theta);
  std::vector<double>& inv = table.inv_freq;
  const double d = static_cast<double>(head_dim);
  const double original = static_cast<double>(s.original_max_position_embeddings);
  switch (s.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      for (double& f : inv) f /= s.factor;
      break;
    case RopeType::kLlama3: {
      const double low_wavelen = original / s.low_freq_factor;    // longer: divided by factor
      const double high_wavelen = original / s.high_freq_factor;  // shorter: kept
      for (double& f : inv) {
        const double wavelen = 2 * std::numbers::pi / f;
        if (wavelen > low_wavelen) {
          f /= s.factor;
        } else if (!(wavelen < high_wavelen)) {
          const double smooth =
              (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
          f = (1 - smooth) * f / s.factor + smooth * f;
        }
      }
      break;
    }
    case RopeType::kYarn: {
      // transformers reads `beta or default`: 0 counts as absent.
      const double beta_fast = s.beta_fast.value_or(0) != 0 ? *s.beta_fast : 32.0;
      const double beta_slow = s.beta_slow.value_or(0) != 0 ? *s.beta_slow : 1.0;
      double lo = YarnCorrectionDim(beta_fast, d, theta, original);
      double hi = YarnCorrectionDim(beta_slow, d, theta, original);
      if (s.truncate.value_or(true)) {
        lo = std::floor(lo);
        hi = std::ceil(hi);
      }
      lo = std::max(lo, 0.0);
      hi = std::min(hi, d - 1);
      if (lo == hi) hi += 0.001;
      for (size_t i = 0; i < inv.size(); ++i) {
        const double ramp = std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0);
        inv[i] = inv[i] / s.factor * ramp + inv[i] * (1 - ramp);
      }
      if (s.attention_factor.has_value()) {
        table.attention_scaling = *s.attention_factor;
      } else if (s.mscale.value_or(0) != 0 && s.mscale_all_dim.value_or(0) != 0) {
        table.attention_scaling =
            YarnMscale(s.factor, *s.mscale) / YarnMscale(s.factor, *s.mscale_all_dim);
      } else {
        table.attention_scaling = YarnMscale(s.factor, 1.0);
      }
      break;
    }
  }
  return table;
}

}  // namespace sbp
