#include "kernels/random.h"

#include <cmath>

namespace sbp {
namespace {

// Uniform in (0, 1), never exactly 0 (safe for log).
double UnitUniform(uint64_t seed, uint64_t index) {
  return (static_cast<double>(HashIndex(seed, index) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

void Store(Tensor& t, int64_t i, float value) {
  if (t.dtype() == DType::kBF16) {
    t.data<bf16_t>()[i] = FloatToBf16(value);
  } else {
    t.data<float>()[i] = value;
  }
}

}  // namespace

uint64_t HashIndex(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void FillNormal(Tensor& tensor, uint64_t seed, float mean, float std) {
  CHECK(tensor.device().is_cpu());
  const int64_t n = tensor.numel();
  for (int64_t i = 0; i < n; i += 2) {
    const double u1 = UnitUniform(seed, static_cast<uint64_t>(i));
    const double u2 = UnitUniform(seed, static_cast<uint64_t>(i + 1));
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * M_PI * u2;
    Store(tensor, i, static_cast<float>(mean + std * r * std::cos(angle)));
    if (i + 1 < n) Store(tensor, i + 1, static_cast<float>(mean + std * r * std::sin(angle)));
  }
}

void FillUniform(Tensor& tensor, uint64_t seed, float low, float high) {
  CHECK(tensor.device().is_cpu());
  const int64_t n = tensor.numel();
  for (int64_t i = 0; i < n; ++i) {
    Store(tensor, i, static_cast<float>(low + (high - low) * UnitUniform(seed, i)));
  }
}

void FillIntegers(Tensor& tensor, uint64_t seed, int32_t low, int32_t high) {
  CHECK(tensor.device().is_cpu());
  CHECK_LT(low, high);
  int32_t* data = tensor.data<int32_t>();
  const uint64_t span = static_cast<uint64_t>(static_cast<int64_t>(high) - low);
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    data[i] = static_cast<int32_t>(low + static_cast<int64_t>(HashIndex(seed, i) % span));
  }
}

}  // namespace sbp
