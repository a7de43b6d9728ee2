#include "kernels/random.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace sbp {
namespace {

// Runs fn(begin, end) over [0, n) in blocks of an even size on up to one
// thread per core when n is large. Values depend on (seed, index) only, so
// the split never changes the result.
template <typename Fn>
void ForRanges(int64_t n, Fn fn) {
  constexpr int64_t kMinPerThread = int64_t{1} << 20;
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t threads = std::min(cores, (n + kMinPerThread - 1) / kMinPerThread);
  if (threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t per = ((n + threads - 1) / threads + 1) / 2 * 2;
  std::vector<std::thread> workers;
  for (int64_t begin = 0; begin < n; begin += per) {
    workers.emplace_back(fn, begin, std::min(n, begin + per));
  }
  for (std::thread& w : workers) w.join();
}

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
  ForRanges(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i += 2) {
      const double u1 = UnitUniform(seed, static_cast<uint64_t>(i));
      const double u2 = UnitUniform(seed, static_cast<uint64_t>(i + 1));
      const double r = std::sqrt(-2.0 * std::log(u1));
      const double angle = 2.0 * M_PI * u2;
      Store(tensor, i, static_cast<float>(mean + std * r * std::cos(angle)));
      if (i + 1 < n) Store(tensor, i + 1, static_cast<float>(mean + std * r * std::sin(angle)));
    }
  });
}

void FillUniform(Tensor& tensor, uint64_t seed, float low, float high) {
  CHECK(tensor.device().is_cpu());
  ForRanges(tensor.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      Store(tensor, i, static_cast<float>(low + (high - low) * UnitUniform(seed, i)));
    }
  });
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
