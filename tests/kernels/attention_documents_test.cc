// CPU attention over packed documents (cu_seqlens offsets, kernels/documents.h)
// against a dense-masked double-precision reference: query p sees keys
// [DocumentStart(p), p]. Covers tiles that straddle document boundaries and
// skipped tiles (sequences longer than one 256-row tile), GQA, query chunks
// (StreamBP's use, dK/dV accumulated over chunks), central finite differences
// of L = sum(out * R), and that no document sees another: each document's
// rows equal attention over that document alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/allocator.h"
#include "kernels/cpu/attention.h"
#include "kernels/documents.h"
#include "kernels/random.h"
#include "kernels/tensor.h"

namespace sbp {
namespace {

using Vec = std::vector<double>;

CpuAllocator& Alloc() {
  static CpuAllocator* alloc = new CpuAllocator();
  return *alloc;
}

Tensor Zeros(Shape shape) {
  auto t = Tensor::Zeros(Alloc(), std::move(shape), DType::kF32, "test tensor");
  CHECK_OK(t.status());
  return *std::move(t);
}

Tensor Normal(Shape shape, uint64_t seed) {
  Tensor t = Zeros(std::move(shape));
  FillNormal(t, seed, 0.0f, 1.0f);
  return t;
}

Vec ToVec(const Tensor& t) { return Vec(t.data<float>(), t.data<float>() + t.numel()); }

// Offsets of documents with these lengths: {0, l0, l0 + l1, ...}.
std::vector<int32_t> Offsets(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> o = {0};
  for (int32_t l : lengths) o.push_back(o.back() + l);
  return o;
}

struct Case {
  int64_t t, hq, hkv, d;
  std::vector<int32_t> lengths;  // documents, summing to t
};

struct Ref {
  Vec out, dq, dk, dv;
};

// Dense reference: mask[i][j] = start(i) <= j <= i, explicit softmax.
Ref Reference(const Vec& q, const Vec& k, const Vec& v, const Vec& dout, const Case& c,
              const std::vector<int32_t>& offsets, double scale) {
  const int64_t group = c.hq / c.hkv, d = c.d;
  Ref r{Vec(q.size(), 0.0), Vec(q.size(), 0.0), Vec(k.size(), 0.0), Vec(v.size(), 0.0)};
  for (int64_t h = 0; h < c.hq; ++h) {
    const int64_t g = h / group;
    for (int64_t i = 0; i < c.t; ++i) {
      const int64_t j0 = DocumentStart(offsets.data(), static_cast<int64_t>(offsets.size()), i);
      const int64_t n = i + 1 - j0;
      Vec s(n), p(n), dp(n);
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t x = 0; x < d; ++x)
          dot += q[(i * c.hq + h) * d + x] * k[((j0 + j) * c.hkv + g) * d + x];
        s[j] = scale * dot;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += std::exp(s[j] - mx);
      double delta = 0;
      for (int64_t j = 0; j < n; ++j) {
        p[j] = std::exp(s[j] - mx) / sum;
        double dot = 0;
        for (int64_t x = 0; x < d; ++x) {
          r.out[(i * c.hq + h) * d + x] += p[j] * v[((j0 + j) * c.hkv + g) * d + x];
          dot += dout[(i * c.hq + h) * d + x] * v[((j0 + j) * c.hkv + g) * d + x];
        }
        dp[j] = dot;
        delta += p[j] * dot;
      }
      for (int64_t j = 0; j < n; ++j) {
        const double ds = p[j] * (dp[j] - delta);
        for (int64_t x = 0; x < d; ++x) {
          r.dq[(i * c.hq + h) * d + x] += scale * ds * k[((j0 + j) * c.hkv + g) * d + x];
          r.dk[((j0 + j) * c.hkv + g) * d + x] += scale * ds * q[(i * c.hq + h) * d + x];
          r.dv[((j0 + j) * c.hkv + g) * d + x] += p[j] * dout[(i * c.hq + h) * d + x];
        }
      }
    }
  }
  return r;
}

double RelErr(const Vec& a, const Vec& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    ref += b[i] * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-300);
}

struct Kernel {
  Tensor out, lse, dq, dk, dv;
};

// The kernels over query chunks of `chunk` rows (q_offset = chunk start),
// dK/dV accumulated, as the stream engine calls them.
Kernel RunChunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                  const Tensor& offsets, float scale, int64_t chunk) {
  const int64_t t = q.dim(0), hq = q.dim(1);
  Kernel r{Zeros(q.shape()), Zeros({t, hq}), Zeros(q.shape()), Zeros(k.shape()), Zeros(k.shape())};
  for (int64_t s = 0; s < t; s += chunk) {
    const int64_t e = std::min(t, s + chunk);
    Tensor out = r.out.Rows(s, e), lse = r.lse.Rows(s, e), dq = r.dq.Rows(s, e);
    const Tensor keys = k.Rows(0, e), values = v.Rows(0, e);
    Tensor dk = r.dk.Rows(0, e), dv = r.dv.Rows(0, e);
    cpu::AttentionForward(q.Rows(s, e), keys, values, s, scale, out, &lse, &offsets);
    cpu::AttentionBackward(q.Rows(s, e), keys, values, out, dout.Rows(s, e), lse, s, scale, dq, dk,
                           dv, &offsets);
  }
  return r;
}

class AttentionDocumentsTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionDocumentsTest, MatchesDenseMaskedReferenceWholeAndChunked) {
  const Case c = GetParam();
  std::vector<int32_t> offsets = Offsets(c.lengths);
  ASSERT_EQ(offsets.back(), c.t);
  const Tensor offsets_t =
      Tensor::Wrap(offsets.data(), {static_cast<int64_t>(offsets.size())}, DType::kI32);
  const Tensor q = Normal({c.t, c.hq, c.d}, 11), k = Normal({c.t, c.hkv, c.d}, 12),
               v = Normal({c.t, c.hkv, c.d}, 13), dout = Normal({c.t, c.hq, c.d}, 14);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  const Ref ref = Reference(ToVec(q), ToVec(k), ToVec(v), ToVec(dout), c, offsets, scale);
  for (int64_t chunk : {c.t, int64_t{97}, int64_t{300}}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const Kernel r = RunChunked(q, k, v, dout, offsets_t, scale, chunk);
    EXPECT_LT(RelErr(ToVec(r.out), ref.out), 2e-6);
    EXPECT_LT(RelErr(ToVec(r.dq), ref.dq), 2e-5);
    EXPECT_LT(RelErr(ToVec(r.dk), ref.dk), 2e-5);
    EXPECT_LT(RelErr(ToVec(r.dv), ref.dv), 2e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionDocumentsTest,
    ::testing::Values(Case{7, 2, 1, 8, {3, 4}}, Case{40, 4, 2, 16, {1, 13, 1, 25}},
                      // Tiles of 256 rows: documents inside, across and between tiles.
                      Case{700, 2, 1, 16, {100, 300, 7, 1, 192, 100}},
                      Case{600, 4, 2, 8, {256, 256, 88}}, Case{530, 2, 2, 8, {530}}));

TEST(AttentionDocumentsTest, EachDocumentEqualsAttentionOverItAlone) {
  const std::vector<int32_t> lengths = {300, 5, 400};
  std::vector<int32_t> offsets = Offsets(lengths);
  const int64_t t = offsets.back(), hq = 4, hkv = 2, d = 16;
  const Tensor offsets_t = Tensor::Wrap(offsets.data(), {4}, DType::kI32);
  const Tensor q = Normal({t, hq, d}, 21), k = Normal({t, hkv, d}, 22), v = Normal({t, hkv, d}, 23),
               dout = Normal({t, hq, d}, 24);
  const float scale = 0.25f;
  const Kernel packed = RunChunked(q, k, v, dout, offsets_t, scale, 128);
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t s = offsets[i], e = offsets[i + 1];
    std::vector<int32_t> one = {0, static_cast<int32_t>(e - s)};
    const Tensor one_t = Tensor::Wrap(one.data(), {2}, DType::kI32);
    auto own = [](const Tensor& x) {
      Tensor c = Zeros(x.shape());
      std::memcpy(c.data<float>(), x.data<float>(), x.nbytes());
      return c;
    };
    const Kernel alone = RunChunked(own(q.Rows(s, e)), own(k.Rows(s, e)), own(v.Rows(s, e)),
                                    own(dout.Rows(s, e)), one_t, scale, 128);
    EXPECT_LT(RelErr(ToVec(packed.out.Rows(s, e)), ToVec(alone.out)), 1e-6) << "document " << i;
    EXPECT_LT(RelErr(ToVec(packed.dq.Rows(s, e)), ToVec(alone.dq)), 1e-5) << "document " << i;
    EXPECT_LT(RelErr(ToVec(packed.dk.Rows(s, e)), ToVec(alone.dk)), 1e-5) << "document " << i;
    EXPECT_LT(RelErr(ToVec(packed.dv.Rows(s, e)), ToVec(alone.dv)), 1e-5) << "document " << i;
  }
}

TEST(AttentionDocumentsTest, OneDocumentIsBitwisePlainCausal) {
  const int64_t t = 520, hq = 2, hkv = 1, d = 8;
  std::vector<int32_t> offsets = {0, static_cast<int32_t>(t)};
  const Tensor offsets_t = Tensor::Wrap(offsets.data(), {2}, DType::kI32);
  const Tensor q = Normal({t, hq, d}, 31), k = Normal({t, hkv, d}, 32), v = Normal({t, hkv, d}, 33),
               dout = Normal({t, hq, d}, 34);
  const Kernel docs = RunChunked(q, k, v, dout, offsets_t, 0.3f, t);
  Kernel plain{Zeros(q.shape()), Zeros({t, hq}), Zeros(q.shape()), Zeros(k.shape()),
               Zeros(k.shape())};
  cpu::AttentionForward(q, k, v, 0, 0.3f, plain.out, &plain.lse);
  cpu::AttentionBackward(q, k, v, plain.out, dout, plain.lse, 0, 0.3f, plain.dq, plain.dk,
                         plain.dv);
  for (auto [a, b] : {std::pair{&docs.out, &plain.out},
                      {&docs.dq, &plain.dq},
                      {&docs.dk, &plain.dk},
                      {&docs.dv, &plain.dv}}) {
    EXPECT_EQ(std::memcmp(a->raw_data(), b->raw_data(), a->nbytes()), 0);
  }
}

// L = sum(out * R): the kernel's dq, dk, dv against central differences in double.
TEST(AttentionDocumentsTest, BackwardMatchesFiniteDifferences) {
  const Case c{12, 2, 1, 4, {5, 1, 6}};
  std::vector<int32_t> offsets = Offsets(c.lengths);
  const Tensor offsets_t = Tensor::Wrap(offsets.data(), {4}, DType::kI32);
  Tensor q = Normal({c.t, c.hq, c.d}, 41), k = Normal({c.t, c.hkv, c.d}, 42),
         v = Normal({c.t, c.hkv, c.d}, 43);
  const Tensor r = Normal({c.t, c.hq, c.d}, 44);
  const float scale = 0.5f;
  const Kernel g = RunChunked(q, k, v, r, offsets_t, scale, 5);
  auto loss = [&]() {
    Tensor out = Zeros(q.shape());
    cpu::AttentionForward(q, k, v, 0, scale, out, nullptr, &offsets_t);
    double l = 0;
    for (int64_t i = 0; i < out.numel(); ++i)
      l += double{out.data<float>()[i]} * r.data<float>()[i];
    return l;
  };
  const float h = 1e-2f;
  for (auto [x, dx] : {std::pair{&q, &g.dq}, {&k, &g.dk}, {&v, &g.dv}}) {
    Vec numeric, analytic;
    for (int64_t i = 0; i < x->numel(); ++i) {
      float& e = x->data<float>()[i];
      const float saved = e;
      e = saved + h;
      const double up = loss();
      e = saved - h;
      const double down = loss();
      e = saved;
      numeric.push_back((up - down) / (2.0 * h));
      analytic.push_back(dx->data<float>()[i]);
    }
    EXPECT_LT(RelErr(analytic, numeric), 2e-3);
  }
}

TEST(AttentionDocumentsDeathTest, RejectsBadOffsets) {
  const Tensor q = Normal({4, 1, 4}, 1), k = Normal({4, 1, 4}, 2);
  Tensor out = Zeros({4, 1, 4});
  std::vector<int32_t> short_offsets = {0, 3};
  const Tensor short_t = Tensor::Wrap(short_offsets.data(), {2}, DType::kI32);
  EXPECT_DEATH(cpu::AttentionForward(q, k, k, 0, 1.0f, out, nullptr, &short_t), "end at 3");
  std::vector<int32_t> flat = {0, 2, 2, 4};
  const Tensor flat_t = Tensor::Wrap(flat.data(), {4}, DType::kI32);
  EXPECT_DEATH(cpu::AttentionForward(q, k, k, 0, 1.0f, out, nullptr, &flat_t), "must increase");
}

}  // namespace
}  // namespace sbp
