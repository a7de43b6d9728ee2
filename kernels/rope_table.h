// The rotary table of a model, computed once from its config and handed to
// the RoPE ops of every backend:
//
//   inv_freq_i  (i < d/2)  radians per position of pair i, in double;
//   attention_scaling      multiplies cos and sin (Hugging Face's
//                          `attention_scaling`: 1 except for YaRN).
//
// Row t of a chunk with offset s has angle (s + t) * inv_freq_i. Plain RoPE
// has inv_freq_i = theta^(-2i/d); scaled variants (linear, llama3, yarn)
// change the frequencies and the scaling (worker/model/rope_scaling.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace sbp {

struct RopeTable {
  std::vector<double> inv_freq;  // [d/2]
  double attention_scaling = 1.0;

  int64_t head_dim() const { return 2 * static_cast<int64_t>(inv_freq.size()); }
  bool operator==(const RopeTable&) const = default;
};

// Plain RoPE of head_dim d (even) and base theta: inv_freq_i = theta^(-2i/d).
inline RopeTable PlainRopeTable(int64_t head_dim, double theta) {
  RopeTable table;
  table.inv_freq.resize(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    table.inv_freq[static_cast<size_t>(i)] =
        std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  }
  return table;
}

}  // namespace sbp
