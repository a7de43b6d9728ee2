// Deterministic random fills: the same seed gives the same values on every
// platform and thread count (counter-based: element i depends only on
// (seed, i)), so presets and tests are reproducible bit for bit.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace sbp {

// 64-bit mix of (seed, index) (SplitMix64 finaliser).
uint64_t HashIndex(uint64_t seed, uint64_t index);

// Host f32 (or bf16) tensor <- N(mean, std^2) via Box-Muller on hashed uniforms.
void FillNormal(Tensor& tensor, uint64_t seed, float mean, float std);
// Host f32 (or bf16) tensor <- U[low, high).
void FillUniform(Tensor& tensor, uint64_t seed, float low, float high);
// Host i32 tensor <- integers in [low, high).
void FillIntegers(Tensor& tensor, uint64_t seed, int32_t low, int32_t high);

}  // namespace sbp
