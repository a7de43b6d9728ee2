// Tests of the CPU causal GQA attention (kernels/cpu/attention.h) against a
// naive double-precision reference (explicit softmax with the causal mask,
// K/V heads repeated), central finite differences of L = sum(out * R), query
// chunking (StreamBP's use) and the write/accumulate rules of the gradients.
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/allocator.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/random.h"
#include "kernels/tensor.h"
#include "kernels/tensor_checks.h"

namespace sbp {
namespace {

using cpu::AttentionBackward;
using cpu::AttentionForward;
using Vec = std::vector<double>;

CpuAllocator& Alloc() {
  static CpuAllocator* alloc = new CpuAllocator();
  return *alloc;
}

Tensor NewTensor(Shape shape) {
  auto t = Tensor::Zeros(Alloc(), std::move(shape), DType::kF32, "test tensor");
  CHECK_OK(t.status());
  return *std::move(t);
}

Tensor Normal(Shape shape, uint64_t seed, float std = 1.0f) {
  Tensor t = NewTensor(std::move(shape));
  FillNormal(t, seed, 0.0f, std);
  return t;
}

Tensor Copy(const Tensor& src) {
  Tensor t = NewTensor(src.shape());
  std::memcpy(t.data<float>(), src.data<float>(), src.nbytes());
  return t;
}

Vec ToVec(const Tensor& t) {
  const float* p = t.data<float>();
  return Vec(p, p + t.numel());
}

double MaxAbs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::abs(double{t.data<float>()[i]}));
  return m;
}

double MaxAbsDiff(const Tensor& a, const Tensor& b) {
  CHECK_EQ(a.numel(), b.numel());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    m = std::max(m, std::abs(double{a.data<float>()[i]} - double{b.data<float>()[i]}));
  }
  return m;
}

bool BitwiseEqual(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

struct Dims {
  int64_t tq, tk, hq, hkv, d, q_offset;
};

// ---- double-precision references (repeat_kv by indexing h / group) ---------

struct RefForwardResult {
  Vec out, lse, probs;  // probs [Hq, Tq, Tk] (0 where masked)
};

RefForwardResult RefForward(const Vec& q, const Vec& k, const Vec& v, const Dims& s, double scale) {
  const int64_t group = s.hq / s.hkv;
  RefForwardResult r{Vec(s.tq * s.hq * s.d, 0.0), Vec(s.tq * s.hq, 0.0),
                     Vec(s.hq * s.tq * s.tk, 0.0)};
  for (int64_t h = 0; h < s.hq; ++h) {
    const int64_t g = h / group;
    for (int64_t i = 0; i < s.tq; ++i) {
      const int64_t n = s.q_offset + i + 1;  // visible keys [0, n)
      Vec scores(n);
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < s.d; ++c) {
          dot += q[(i * s.hq + h) * s.d + c] * k[(j * s.hkv + g) * s.d + c];
        }
        scores[j] = scale * dot;
        mx = std::max(mx, scores[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += std::exp(scores[j] - mx);
      r.lse[i * s.hq + h] = mx + std::log(sum);
      for (int64_t j = 0; j < n; ++j) {
        const double p = std::exp(scores[j] - mx) / sum;
        r.probs[(h * s.tq + i) * s.tk + j] = p;
        for (int64_t c = 0; c < s.d; ++c) {
          r.out[(i * s.hq + h) * s.d + c] += p * v[(j * s.hkv + g) * s.d + c];
        }
      }
    }
  }
  return r;
}

struct RefGrads {
  Vec dq, dk, dv;
};

RefGrads RefBackward(const Vec& q, const Vec& k, const Vec& v, const Vec& dout, const Dims& s,
                     double scale) {
  const int64_t group = s.hq / s.hkv;
  const RefForwardResult f = RefForward(q, k, v, s, scale);
  RefGrads g{Vec(q.size(), 0.0), Vec(k.size(), 0.0), Vec(v.size(), 0.0)};
  for (int64_t h = 0; h < s.hq; ++h) {
    const int64_t kh = h / group;
    for (int64_t i = 0; i < s.tq; ++i) {
      const int64_t n = s.q_offset + i + 1;
      const double* p = &f.probs[(h * s.tq + i) * s.tk];
      const double* dor = &dout[(i * s.hq + h) * s.d];
      Vec dp(n);
      double delta = 0;  // sum_j p_j dp_j
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < s.d; ++c) dot += dor[c] * v[(j * s.hkv + kh) * s.d + c];
        dp[j] = dot;
        delta += p[j] * dot;
      }
      for (int64_t j = 0; j < n; ++j) {
        const double ds = p[j] * (dp[j] - delta);
        for (int64_t c = 0; c < s.d; ++c) {
          g.dq[(i * s.hq + h) * s.d + c] += scale * ds * k[(j * s.hkv + kh) * s.d + c];
          g.dk[(j * s.hkv + kh) * s.d + c] += scale * ds * q[(i * s.hq + h) * s.d + c];
          g.dv[(j * s.hkv + kh) * s.d + c] += p[j] * dor[c];
        }
      }
    }
  }
  return g;
}

double RelErr(const Vec& a, const Vec& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    ref += b[i] * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-300);
}

// ---- a problem instance and the kernel's results on it ---------------------

struct Problem {
  Dims s;
  float scale;
  Tensor q, k, v, dout;

  Problem(Dims dims, uint64_t seed, float q_std = 1.0f) : s(dims) {
    scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    q = Normal({s.tq, s.hq, s.d}, seed, q_std);
    k = Normal({s.tk, s.hkv, s.d}, seed + 1);
    v = Normal({s.tk, s.hkv, s.d}, seed + 2);
    dout = Normal({s.tq, s.hq, s.d}, seed + 3);
  }
};

struct Result {
  Tensor out, lse, dq, dk, dv;
};

Result RunKernels(const Problem& p) {
  Result r{NewTensor(p.q.shape()), NewTensor({p.s.tq, p.s.hq}), NewTensor(p.q.shape()),
           NewTensor(p.k.shape()), NewTensor(p.k.shape())};
  AttentionForward(p.q, p.k, p.v, p.s.q_offset, p.scale, r.out, &r.lse);
  AttentionBackward(p.q, p.k, p.v, r.out, p.dout, r.lse, p.s.q_offset, p.scale, r.dq, r.dk, r.dv);
  for (const Tensor* t : {&r.out, &r.lse, &r.dq, &r.dk, &r.dv}) {
    EXPECT_TRUE(CheckFinite(*t, "attention result").ok());
  }
  return r;
}

std::string Name(const Dims& s) {
  return "Tq=" + std::to_string(s.tq) + " Tk=" + std::to_string(s.tk) +
         " Hq=" + std::to_string(s.hq) + " Hkv=" + std::to_string(s.hkv) +
         " d=" + std::to_string(s.d) + " q_offset=" + std::to_string(s.q_offset);
}

// ---- tests -------------------------------------------------------------------

TEST(AttentionTiles, FastExpIsAccurate) {
  double worst = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.0f + 88.0f * static_cast<float>(i) / 200000.0f;
    const double want = std::exp(static_cast<double>(x));
    const double got = cpu::attention_internal::FastExp(x);
    worst = std::max(worst, std::abs(got - want) / want);
  }
  EXPECT_LT(worst, 2.5e-7);
  EXPECT_EQ(cpu::attention_internal::FastExp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(cpu::attention_internal::FastExp(-100.0f), 0.0f);
  EXPECT_EQ(cpu::attention_internal::FastExp(0.0f), 1.0f);
}

// Lengths are chosen around the tile size so that every case spans several
// tiles, partial tiles and diagonal strips whatever the tuning.
constexpr int64_t kTile = cpu::kAttentionTileQ;
static_assert(cpu::kAttentionTileQ == cpu::kAttentionTileK);

TEST(Attention, ForwardMatchesDoubleReference) {
  const std::vector<Dims> cases = {
      {1, 1, 1, 1, 16, 0},
      {7, 7, 2, 1, 16, 0},
      {kTile + 2, kTile + 2, 4, 2, 64, 0},
      {2 * kTile + 44, 2 * kTile + 44, 2, 1, 128, 0},
      {kTile + 1, kTile + 1, 4, 4, 40, 0},
      {1, 3 * kTile + 10, 4, 2, 64, 3 * kTile + 9},
      {50, 2 * kTile, 8, 2, 64, kTile + 77},
      {kTile + 1, 2 * kTile + 4, 2, 2, 128, kTile + 3},
      {kTile - 56, kTile, 4, 1, 16, 17},
  };
  uint64_t seed = 100;
  for (const Dims& s : cases) {
    SCOPED_TRACE(Name(s));
    const Problem p(s, seed += 10, /*q_std=*/2.0f);  // peaked softmax rows
    Tensor out = NewTensor(p.q.shape()), lse = NewTensor({s.tq, s.hq});
    AttentionForward(p.q, p.k, p.v, s.q_offset, p.scale, out, &lse);
    const RefForwardResult ref = RefForward(ToVec(p.q), ToVec(p.k), ToVec(p.v), s, p.scale);
    EXPECT_LT(RelErr(ToVec(out), ref.out), 1e-5);
    EXPECT_LT(RelErr(ToVec(lse), ref.lse), 1e-6);
    // lse is optional.
    Tensor out2 = NewTensor(p.q.shape());
    AttentionForward(p.q, p.k, p.v, s.q_offset, p.scale, out2, nullptr);
    EXPECT_TRUE(BitwiseEqual(out, out2));
  }
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  const std::vector<Dims> cases = {
      {5, 9, 4, 2, 8, 3}, {6, 6, 2, 2, 6, 0}, {3, 3, 4, 1, 16, 0}, {1, 4, 2, 1, 8, 3}};
  uint64_t seed = 500;
  for (const Dims& s : cases) {
    SCOPED_TRACE(Name(s));
    const Problem p(s, seed += 10);
    const Result r = RunKernels(p);
    const Vec q = ToVec(p.q), k = ToVec(p.k), v = ToVec(p.v), weights = ToVec(p.dout);
    auto loss = [&](const Vec& qq, const Vec& kk, const Vec& vv) {
      const Vec out = RefForward(qq, kk, vv, s, p.scale).out;
      double sum = 0;
      for (size_t i = 0; i < out.size(); ++i) sum += out[i] * weights[i];
      return sum;
    };
    const double eps = 1e-5;
    auto fd = [&](int which) {
      Vec x[3] = {q, k, v};
      Vec grad(x[which].size());
      for (size_t i = 0; i < grad.size(); ++i) {
        const double saved = x[which][i];
        x[which][i] = saved + eps;
        const double up = loss(x[0], x[1], x[2]);
        x[which][i] = saved - eps;
        const double down = loss(x[0], x[1], x[2]);
        x[which][i] = saved;
        grad[i] = (up - down) / (2 * eps);
      }
      return grad;
    };
    EXPECT_LT(RelErr(ToVec(r.dq), fd(0)), 2e-5);
    EXPECT_LT(RelErr(ToVec(r.dk), fd(1)), 2e-5);
    EXPECT_LT(RelErr(ToVec(r.dv), fd(2)), 2e-5);
  }
}

TEST(Attention, BackwardMatchesDoubleReference) {
  const std::vector<Dims> cases = {
      {kTile + 2, kTile + 2, 4, 2, 64, 0},    {2 * kTile + 44, 2 * kTile + 44, 2, 1, 128, 0},
      {kTile + 1, kTile + 44, 4, 4, 24, 40},  {1, 3 * kTile, 4, 2, 64, 3 * kTile - 1},
      {60, 2 * kTile, 8, 2, 16, kTile + 100}, {kTile + 12, 2 * kTile + 7, 2, 1, 128, kTile - 5},
  };
  uint64_t seed = 900;
  for (const Dims& s : cases) {
    SCOPED_TRACE(Name(s));
    const Problem p(s, seed += 10, /*q_std=*/1.5f);
    const Result r = RunKernels(p);
    const RefGrads ref = RefBackward(ToVec(p.q), ToVec(p.k), ToVec(p.v), ToVec(p.dout), s, p.scale);
    EXPECT_LT(RelErr(ToVec(r.dq), ref.dq), 1e-5);
    EXPECT_LT(RelErr(ToVec(r.dk), ref.dk), 1e-5);
    EXPECT_LT(RelErr(ToVec(r.dv), ref.dv), 1e-5);
    // Key rows past q_offset + Tq are neither read nor written.
    const int64_t used = s.q_offset + s.tq;
    for (int64_t i = used * s.hkv * s.d; i < r.dk.numel(); ++i) {
      ASSERT_EQ(r.dk.data<float>()[i], 0.0f);
      ASSERT_EQ(r.dv.data<float>()[i], 0.0f);
    }
  }
}

// StreamBP calls the kernels on query chunks [s, e) with q_offset = s and the
// whole K/V: outputs and dq rows must match, dk/dv summed over chunks too.
TEST(Attention, ChunkedCallsMatchTheWholeSequence) {
  struct ChunkCase {
    int64_t t, hq, hkv, d;
    std::vector<int64_t> bounds;  // chunk boundaries, 0 ... t; empty = random
  };
  const std::vector<ChunkCase> cases = {
      {2 * kTile + 44, 4, 4, 16, {}},
      {2 * kTile + 44, 4, 2, 64, {}},
      {kTile + 44, 8, 2, 128, {}},
      {kTile + 5, 4, 1, 64, {}},
      {37, 4, 2, 16, {}},
      {kTile + 72, 2, 1, 40, {0, 1, 2, kTile + 1, kTile + 2, kTile + 72}},
      {kTile + 22, 4, 2, 64, {0, kTile + 22}},
  };
  std::mt19937_64 rng(7);
  uint64_t seed = 2000;
  for (ChunkCase c : cases) {
    if (c.bounds.empty()) {
      // Random chunk sizes in [1, 200], the first of size 1; all size 1 for short sequences.
      c.bounds = {0};
      bool had_one = false;
      while (c.bounds.back() < c.t) {
        int64_t size = c.t < 50 ? 1 : (had_one ? 1 + static_cast<int64_t>(rng() % 200) : 1);
        had_one = true;
        c.bounds.push_back(std::min(c.t, c.bounds.back() + size));
      }
    }
    const Dims whole{c.t, c.t, c.hq, c.hkv, c.d, 0};
    SCOPED_TRACE(Name(whole) + " chunks=" + std::to_string(c.bounds.size() - 1));
    const Problem p(whole, seed += 10, /*q_std=*/1.5f);
    const Result ref = RunKernels(p);

    Tensor dk = NewTensor(p.k.shape()), dv = NewTensor(p.k.shape());
    for (size_t b = 0; b + 1 < c.bounds.size(); ++b) {
      const int64_t s = c.bounds[b], e = c.bounds[b + 1];
      const Tensor q = p.q.Rows(s, e), dout = p.dout.Rows(s, e);
      Tensor out = NewTensor(q.shape()), lse = NewTensor({e - s, c.hq});
      Tensor dq = NewTensor(q.shape());
      AttentionForward(q, p.k, p.v, s, p.scale, out, &lse);
      AttentionBackward(q, p.k, p.v, out, dout, lse, s, p.scale, dq, dk, dv);
      SCOPED_TRACE("chunk [" + std::to_string(s) + ", " + std::to_string(e) + ")");
      ASSERT_LT(RelativeError(out, ref.out.Rows(s, e)), 1e-6);
      ASSERT_LT(RelativeError(lse, ref.lse.Rows(s, e)), 1e-6);
      // dq of the first rows is ~0 (a row that sees one key has dq = 0), so
      // its error is measured against the scale of the whole dq.
      ASSERT_LT(MaxAbsDiff(dq, ref.dq.Rows(s, e)), 1e-5 * MaxAbs(ref.dq));
    }
    EXPECT_LT(RelativeError(dk, ref.dk), 1e-5);
    EXPECT_LT(RelativeError(dv, ref.dv), 1e-5);
  }
}

TEST(Attention, BackwardAccumulatesDkDvAndOverwritesDq) {
  const Dims s{kTile + 20, kTile + 90, 4, 2, 64, 50};
  const Problem p(s, 3000);
  const Result fresh = RunKernels(p);

  Tensor dq = NewTensor(p.q.shape());
  std::fill_n(dq.data<float>(), dq.numel(), std::numeric_limits<float>::quiet_NaN());
  Tensor dk = Normal(p.k.shape(), 3100), dv = Normal(p.k.shape(), 3200);
  const Tensor dk0 = Copy(dk), dv0 = Copy(dv);
  AttentionBackward(p.q, p.k, p.v, fresh.out, p.dout, fresh.lse, s.q_offset, p.scale, dq, dk, dv);
  EXPECT_TRUE(BitwiseEqual(dq, fresh.dq));
  Vec added_k = ToVec(dk), added_v = ToVec(dv);
  for (int64_t i = 0; i < dk.numel(); ++i) {
    added_k[i] -= dk0.data<float>()[i];
    added_v[i] -= dv0.data<float>()[i];
  }
  EXPECT_LT(RelErr(added_k, ToVec(fresh.dk)), 1e-5);
  EXPECT_LT(RelErr(added_v, ToVec(fresh.dv)), 1e-5);
  // Rows past q_offset + Tq keep their values.
  const int64_t used = (s.q_offset + s.tq) * s.hkv * s.d;
  for (int64_t i = used; i < dk.numel(); ++i) {
    ASSERT_EQ(dk.data<float>()[i], dk0.data<float>()[i]);
    ASSERT_EQ(dv.data<float>()[i], dv0.data<float>()[i]);
  }
}

TEST(Attention, ResultsDoNotDependOnTheThreadCount) {
  const Dims s{2 * kTile + 30, 2 * kTile + 30, 4, 1, 64, 0};
  const Problem p(s, 4000);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Result one = RunKernels(p);
  omp_set_num_threads(std::max(saved, 2));
  const Result many = RunKernels(p);
  const Result again = RunKernels(p);
  omp_set_num_threads(saved);
  EXPECT_TRUE(BitwiseEqual(one.out, many.out));
  EXPECT_TRUE(BitwiseEqual(one.lse, many.lse));
  for (const Result* r : {&one, &again}) {
    EXPECT_TRUE(BitwiseEqual(r->dq, many.dq));
    EXPECT_TRUE(BitwiseEqual(r->dk, many.dk));
    EXPECT_TRUE(BitwiseEqual(r->dv, many.dv));
  }
}

TEST(AttentionDeathTest, ShapeErrorsNameTheShapes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Tensor q = NewTensor({4, 4, 16}), k = NewTensor({4, 2, 16}), v = NewTensor({4, 2, 16});
  Tensor out = NewTensor({4, 4, 16}), lse = NewTensor({4, 4});
  Tensor short_k = NewTensor({3, 2, 16}), bad_heads = NewTensor({4, 3, 16});
  Tensor bad_out = NewTensor({4, 4, 8});
  EXPECT_DEATH(AttentionForward(q, short_k, short_k, 0, 1.0f, out, &lse), "\\[3, 2, 16\\]");
  EXPECT_DEATH(AttentionForward(q, k, v, 1, 1.0f, out, &lse), "q_offset 1");
  EXPECT_DEATH(AttentionForward(q, bad_heads, bad_heads, 0, 1.0f, out, &lse), "\\[4, 3, 16\\]");
  EXPECT_DEATH(AttentionForward(q, k, v, 0, 1.0f, bad_out, &lse), "\\[4, 4, 8\\]");
  Tensor bad_lse = NewTensor({4, 2});
  EXPECT_DEATH(AttentionForward(q, k, v, 0, 1.0f, out, &bad_lse), "\\[4, 2\\]");
}

}  // namespace
}  // namespace sbp
