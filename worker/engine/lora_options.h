// What a LoRA run trains: for every targeted linear layer W [out, in] of
// every decoder layer, a low-rank update
//
//   y = x W^T + s (x A^T) B^T,   A [r, in], B [out, r],
//
// with s = alpha / r (alpha / sqrt(r) with rank-stabilised LoRA). The base
// weights are frozen; only A and B are trained.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace sbp {

struct LoraOptions {
  int64_t r = 0;  // 0: no LoRA (full fine-tuning)
  double alpha = 0;
  // Subset of kLoraModules, in that order.
  std::vector<std::string> target_modules;
  bool rslora = false;
  uint64_t init_seed = 0;  // A ~ kaiming-uniform from this seed, B = 0
  double dropout = 0;      // only 0 is supported (gradients stay exact)

  bool enabled() const { return r > 0; }
  double scaling() const {
    return rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
  }
  bool targets(const std::string& module) const {
    for (const std::string& m : target_modules) {
      if (m == module) return true;
    }
    return false;
  }
  bool operator==(const LoraOptions&) const = default;
};

// The linear layers LoRA can target, in the order of a decoder layer.
inline const std::vector<std::string>& LoraModuleNames() {
  static const auto* names = new std::vector<std::string>{
      "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return *names;
}

// InvalidArgument naming the field: r < 1, alpha <= 0, no or unknown target
// modules (named), dropout other than 0.
absl::Status ValidateLoraOptions(const LoraOptions& options);

}  // namespace sbp
