// Branch-free element-wise math for the CPU kernels' row loops (softmax in
// attention tiles, cross-entropy over a vocabulary row). Written so that the
// compiler vectorises the loops that call them; the functions that contain
// those loops are marked SBP_CPU_CLONES, which with GCC on x86-64 compiles
// them for AVX-512, AVX2+FMA and baseline x86-64, and an ifunc resolver picks
// one when the library is loaded (other compilers get the baseline build).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define SBP_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SBP_CPU_CLONES
#endif

namespace sbp::cpu::vector_math {

// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2]
// (ln 2 split in two so that n * kLn2Hi is exact); exp(r) by its degree-7
// Taylor polynomial (truncation error < 5e-9 relative); 2^n added to the
// exponent bits. Relative error below 2.5e-7 for x in [-87, 88]; 0 for
// x < -87 (where exp(x) < 2e-38), including -inf.
__attribute__((always_inline)) inline float ExpInline(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;      // 355/512, 9 significant bits
  constexpr float kLn2Lo = -2.12194440e-4f;   // ln 2 - kLn2Hi
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: + then - rounds (no -ffast-math)
  constexpr float kLow = -87.0f;
  constexpr float kHigh = 88.0f;
  float xc = x < kLow ? kLow : x;
  xc = xc > kHigh ? kHigh : xc;
  const float n = (xc * kLog2e + kRoundMagic) - kRoundMagic;
  float r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = std::bit_cast<int32_t>(p) + (static_cast<int32_t>(n) << 23);
  const float y = std::bit_cast<float>(bits);
  return x < kLow ? 0.0f : y;
}

// A GCC vector of 16 floats: one zmm register on AVX-512, two ymm on AVX2.
typedef float Float16 __attribute__((vector_size(64)));

// max of x[0..n), n >= 1. 16 running maxima in a Float16: an ordered scalar
// max reduction would not vectorise without reassociation flags.
__attribute__((always_inline)) inline float RowMax(const float* x, int64_t n) {
  constexpr int64_t kLanes = 16;
  float mx = x[0];
  int64_t c = 0;
  if (n >= kLanes) {
    Float16 lanes;
    std::memcpy(&lanes, x, sizeof(lanes));
    for (c = kLanes; c + kLanes <= n; c += kLanes) {
      Float16 v;
      std::memcpy(&v, x + c, sizeof(v));
      lanes = v > lanes ? v : lanes;
    }
    for (int64_t u = 0; u < kLanes; ++u) mx = lanes[u] > mx ? lanes[u] : mx;
  }
  for (; c < n; ++c) mx = x[c] > mx ? x[c] : mx;
  return mx;
}

}  // namespace sbp::cpu::vector_math
