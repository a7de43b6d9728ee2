// The CPU attention on each of its paths (sgemm, and the AVX2 + FMA and
// AVX-512 micro-kernels of kernels/cpu/attention_micro.h where this CPU has
// them): the forward against a double-precision reference with the causal
// and document masks on odd shapes (T not a tile multiple, head_dim
// 40/64/80/128/256, GQA, packed documents, query chunks at an offset), the
// backward against the sgemm path's on the same shapes, thread-count
// independence of both passes, and the dispatch switch.
#include "kernels/cpu/attention_micro.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/documents.h"
#include "kernels/tensor.h"
#include "kernels/tensor_checks.h"
#include "tests/kernels/op_test_util.h"

namespace sbp {
namespace {

using cpu::AttentionKernel;
using Vec = std::vector<double>;

using op_test::BitwiseEqual;
using op_test::RelErr;

Tensor Zeros(const Shape& shape) { return op_test::NewTensor(shape); }

Tensor Normal(const Shape& shape, uint64_t seed, float std = 1.0f) {
  return op_test::RandomTensor(shape, seed, std);
}

using cpu::attention_internal::MicroIsa;

// A forward path: sgemm, or the micro-kernels at one ISA width.
struct Path {
  AttentionKernel kernel;
  MicroIsa isa = MicroIsa::kAvx2;
};

// The paths this machine can run.
std::vector<Path> Paths() {
  std::vector<Path> paths = {{AttentionKernel::kBlas}};
  for (MicroIsa isa : {MicroIsa::kAvx2, MicroIsa::kAvx512}) {
    if (cpu::attention_internal::MicroIsaSupported(isa)) {
      paths.push_back({AttentionKernel::kMicroKernel, isa});
    }
  }
  return paths;
}

std::string PathName(const Path& p) {
  if (p.kernel == AttentionKernel::kBlas) return "sgemm";
  return std::string("micro-kernel ") + cpu::attention_internal::MicroIsaName(p.isa);
}

// Forces a path; restores the automatic choice and the default ISA when a
// test ends.
struct ForcedPath {
  explicit ForcedPath(const Path& p) : isa(cpu::attention_internal::MicroKernelIsa()) {
    cpu::SetAttentionKernel(p.kernel);
    if (p.kernel == AttentionKernel::kMicroKernel)
      cpu::attention_internal::SetMicroKernelIsa(p.isa);
  }
  ~ForcedPath() {
    cpu::SetAttentionKernel(AttentionKernel::kAuto);
    if (cpu::attention_internal::MicroKernelSupported()) {
      cpu::attention_internal::SetMicroKernelIsa(isa);
    }
  }
  MicroIsa isa;
};

struct Case {
  int64_t t, hq, hkv, d;
  std::vector<int32_t> docs;  // document lengths summing to t; empty: one document
  int64_t chunk = 0;          // > 0: query chunks of this many rows at their offsets
};

std::string Name(const Case& c) {
  std::string name = "T=" + std::to_string(c.t) + " Hq=" + std::to_string(c.hq) +
                     " Hkv=" + std::to_string(c.hkv) + " d=" + std::to_string(c.d);
  if (!c.docs.empty()) name += " docs=" + std::to_string(c.docs.size());
  if (c.chunk > 0) name += " chunk=" + std::to_string(c.chunk);
  return name;
}

std::vector<int32_t> OffsetsOf(const Case& c) {
  std::vector<int32_t> o = {0};
  for (int32_t l : c.docs) o.push_back(o.back() + l);
  return o;
}

// out and lse in double: query p sees keys [DocumentStart(p), p].
void Reference(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v, float scale,
               Vec& out, Vec& lse) {
  const std::vector<int32_t> offsets = OffsetsOf(c);
  const int64_t group = c.hq / c.hkv;
  out.assign(c.t * c.hq * c.d, 0.0);
  lse.assign(c.t * c.hq, 0.0);
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  for (int64_t h = 0; h < c.hq; ++h) {
    const int64_t g = h / group;
    for (int64_t i = 0; i < c.t; ++i) {
      const int64_t start = c.docs.empty() ? 0 : DocumentStart(offsets.data(), offsets.size(), i);
      Vec s(i + 1 - start);
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = start; j <= i; ++j) {
        double dot = 0;
        for (int64_t x = 0; x < c.d; ++x) {
          dot += double{qp[(i * c.hq + h) * c.d + x]} * kp[(j * c.hkv + g) * c.d + x];
        }
        s[j - start] = scale * dot;
        mx = std::max(mx, s[j - start]);
      }
      double sum = 0;
      for (double x : s) sum += std::exp(x - mx);
      lse[i * c.hq + h] = mx + std::log(sum);
      for (int64_t j = start; j <= i; ++j) {
        const double p = std::exp(s[j - start] - mx) / sum;
        for (int64_t x = 0; x < c.d; ++x) {
          out[(i * c.hq + h) * c.d + x] += p * vp[(j * c.hkv + g) * c.d + x];
        }
      }
    }
  }
}

struct Problem {
  explicit Problem(const Case& c, uint64_t seed)
      : q(Normal({c.t, c.hq, c.d}, seed, 1.5f)),
        k(Normal({c.t, c.hkv, c.d}, seed + 1)),
        v(Normal({c.t, c.hkv, c.d}, seed + 2)),
        offsets(OffsetsOf(c)),
        scale(1.0f / std::sqrt(static_cast<float>(c.d))) {}
  Tensor q, k, v;
  std::vector<int32_t> offsets;
  float scale;
};

// fn(s, e, docs) for the case's query rows [s, e): the whole sequence, or
// its chunks in order; docs the document offsets (null without documents).
template <typename Fn>
void ForEachChunk(const Case& c, Problem& p, Fn fn) {
  Tensor offsets =
      Tensor::Wrap(p.offsets.data(), {static_cast<int64_t>(p.offsets.size())}, DType::kI32);
  const Tensor* docs = c.docs.empty() ? nullptr : &offsets;
  const int64_t chunk = c.chunk > 0 ? c.chunk : c.t;
  for (int64_t s = 0; s < c.t; s += chunk) fn(s, std::min(c.t, s + chunk), docs);
}

// The forward over the whole sequence, whole or in query chunks.
void Forward(const Case& c, Problem& p, Tensor& out, Tensor& lse) {
  ForEachChunk(c, p, [&](int64_t s, int64_t e, const Tensor* docs) {
    Tensor o = out.Rows(s, e), l = lse.Rows(s, e);
    cpu::AttentionForward(p.q.Rows(s, e), p.k, p.v, s, p.scale, o, &l, docs);
  });
}

std::vector<Case> OddCases() {
  return {
      {1, 1, 1, 64, {}},
      {7, 2, 1, 80, {}},
      {257, 4, 2, 64, {}},                    // one row past a tile
      {300, 2, 2, 128, {}},                   // T not a tile multiple, no GQA
      {611, 4, 1, 80, {}},                    // head_dim 80 (five 16-column blocks)
      {533, 2, 1, 256, {}},                   // head_dim 256
      {290, 8, 2, 128, {}, 97},               // GQA 4:1, chunks at offsets 0, 97, ...
      {700, 4, 2, 64, {}, 256},               // tile-sized chunks
      {600, 4, 2, 64, {5, 250, 1, 300, 44}},  // packed documents
      {530, 2, 1, 128, {270, 3, 257}, 111},   // documents and chunks
      {77, 2, 2, 40, {30, 47}, 10},           // head_dim 40 (a tail of 8 columns)
      {45, 2, 1, 36, {}},                     // head_dim 36: sgemm on every path
  };
}

TEST(AttentionMicro, EveryPathMatchesTheDoubleReferenceOnOddShapes) {
  uint64_t seed = 500;
  for (const Case& c : OddCases()) {
    Problem p(c, seed += 10);
    Vec ref_out, ref_lse;
    Reference(c, p.q, p.k, p.v, p.scale, ref_out, ref_lse);
    for (const Path& path : Paths()) {
      SCOPED_TRACE(Name(c) + " " + PathName(path));
      ForcedPath forced(path);
      const bool micro = path.kernel == AttentionKernel::kMicroKernel && c.d % 8 == 0;
      EXPECT_EQ(cpu::AttentionForwardUsesMicroKernel(c.d), micro);
      EXPECT_EQ(cpu::AttentionBackwardUsesMicroKernel(c.d), micro);
      Tensor out = Zeros(p.q.shape()), lse = Zeros({c.t, c.hq});
      Forward(c, p, out, lse);
      EXPECT_LT(RelErr(out, ref_out), 1e-5);
      EXPECT_LT(RelErr(lse, ref_lse), 1e-6);
    }
  }
}

// dq, dk, dv of one path over the case's query chunks (dk and dv summed
// over the chunks, from zero), from that path's forward.
struct Gradients {
  Tensor dq, dk, dv;
};

Gradients Backward(const Case& c, Problem& p, const Tensor& dout) {
  Tensor out = Zeros(p.q.shape()), lse = Zeros({c.t, c.hq});
  Forward(c, p, out, lse);
  Gradients g{Zeros(p.q.shape()), Zeros(p.k.shape()), Zeros(p.k.shape())};
  ForEachChunk(c, p, [&](int64_t s, int64_t e, const Tensor* docs) {
    Tensor dq = g.dq.Rows(s, e);
    cpu::AttentionBackward(p.q.Rows(s, e), p.k, p.v, out.Rows(s, e), dout.Rows(s, e),
                           lse.Rows(s, e), s, p.scale, dq, g.dk, g.dv, docs);
  });
  return g;
}

// The backward on every path against the sgemm path's (which
// attention_test.cc checks against a double reference and finite
// differences) on the odd shapes, chunks and documents.
TEST(AttentionMicro, BackwardOfEveryPathMatchesTheSgemmPathOnOddShapes) {
  uint64_t seed = 700;
  for (const Case& c : OddCases()) {
    Problem p(c, seed += 10);
    const Tensor dout = Normal(p.q.shape(), seed + 5);
    Gradients want;
    {
      ForcedPath forced({AttentionKernel::kBlas});
      want = Backward(c, p, dout);
    }
    for (const Path& path : Paths()) {
      if (path.kernel == AttentionKernel::kBlas) continue;
      SCOPED_TRACE(Name(c) + " " + PathName(path));
      ForcedPath forced(path);
      const Gradients got = Backward(c, p, dout);
      EXPECT_LT(RelativeError(got.dq, want.dq), 1e-5);
      EXPECT_LT(RelativeError(got.dk, want.dk), 1e-5);
      EXPECT_LT(RelativeError(got.dv, want.dv), 1e-5);
    }
  }
}

// The paths agree to rounding, and each is bit-for-bit the same at any
// thread count; the backward from the micro-kernels' output and lse gives
// the gradients the sgemm path's do (to rounding).
TEST(AttentionMicro, PathsAgreeAndDoNotDependOnTheThreadCount) {
  if (!cpu::attention_internal::MicroKernelSupported()) GTEST_SKIP() << "no AVX2 + FMA";
  const Case c{530, 4, 2, 64, {260, 270}, 200};
  Problem p(c, 900);
  Tensor dout = Normal(p.q.shape(), 990);
  struct Result {
    Tensor out, lse, dq, dk, dv;
  };
  auto run = [&](const Path& path, int threads) {
    ForcedPath forced(path);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Result r{Zeros(p.q.shape()), Zeros({c.t, c.hq}), Zeros(p.q.shape()), Zeros(p.k.shape()),
             Zeros(p.k.shape())};
    Forward(c, p, r.out, r.lse);
    Tensor offsets =
        Tensor::Wrap(p.offsets.data(), {static_cast<int64_t>(p.offsets.size())}, DType::kI32);
    cpu::AttentionBackward(p.q, p.k, p.v, r.out, dout, r.lse, 0, p.scale, r.dq, r.dk, r.dv,
                           &offsets);
    omp_set_num_threads(saved);
    return r;
  };
  const Result blas = run({AttentionKernel::kBlas}, 2);
  for (const Path& path : Paths()) {
    if (path.kernel == AttentionKernel::kBlas) continue;
    SCOPED_TRACE(PathName(path));
    const Result one = run(path, 1);
    const Result two = run(path, 2);
    EXPECT_TRUE(BitwiseEqual(one.out, two.out));
    EXPECT_TRUE(BitwiseEqual(one.lse, two.lse));
    EXPECT_TRUE(BitwiseEqual(one.dq, two.dq));
    EXPECT_TRUE(BitwiseEqual(one.dk, two.dk));
    EXPECT_TRUE(BitwiseEqual(one.dv, two.dv));
    EXPECT_LT(RelativeError(two.out, blas.out), 1e-6);
    EXPECT_LT(RelativeError(two.lse, blas.lse), 1e-6);
    EXPECT_LT(RelativeError(two.dq, blas.dq), 1e-5);
    EXPECT_LT(RelativeError(two.dk, blas.dk), 1e-5);
    EXPECT_LT(RelativeError(two.dv, blas.dv), 1e-5);
  }
}

TEST(AttentionMicro, DispatchFollowsTheSwitch) {
  const bool supported = cpu::attention_internal::MicroKernelSupported();
  {
    ForcedPath forced({AttentionKernel::kBlas});
    EXPECT_EQ(cpu::AttentionKernelChoice(), AttentionKernel::kBlas);
    for (int64_t d : {40, 64, 80, 128, 256}) {
      EXPECT_FALSE(cpu::AttentionForwardUsesMicroKernel(d));
      EXPECT_FALSE(cpu::AttentionBackwardUsesMicroKernel(d));
    }
  }
  if (supported) {
    ForcedPath forced({AttentionKernel::kMicroKernel, MicroIsa::kAvx2});
    for (int64_t d : {40, 64, 80, 128, 256}) {
      EXPECT_TRUE(cpu::AttentionForwardUsesMicroKernel(d)) << d;
      EXPECT_TRUE(cpu::AttentionBackwardUsesMicroKernel(d)) << d;
    }
    // A head_dim the micro-kernels cannot take runs on sgemm.
    EXPECT_FALSE(cpu::AttentionForwardUsesMicroKernel(36));
    EXPECT_FALSE(cpu::AttentionBackwardUsesMicroKernel(36));
  }
  EXPECT_EQ(cpu::AttentionKernelChoice(), AttentionKernel::kAuto);
  // The widest ISA the CPU has is the default.
  if (supported) {
    EXPECT_EQ(cpu::attention_internal::MicroKernelIsa(),
              cpu::attention_internal::MicroIsaSupported(MicroIsa::kAvx512) ? MicroIsa::kAvx512
                                                                            : MicroIsa::kAvx2);
  }
  using cpu::attention_internal::MicroPass;
  for (int64_t d : {64, 128}) {
    EXPECT_EQ(cpu::AttentionForwardUsesMicroKernel(d),
              supported && cpu::attention_internal::MicroKernelPreferred(d, MicroPass::kForward));
    EXPECT_EQ(cpu::AttentionBackwardUsesMicroKernel(d),
              supported && cpu::attention_internal::MicroKernelPreferred(d, MicroPass::kBackward));
    // Where the backward takes them the forward does too.
    if (cpu::AttentionBackwardUsesMicroKernel(d)) {
      EXPECT_TRUE(cpu::AttentionForwardUsesMicroKernel(d));
    }
  }
}

}  // namespace
}  // namespace sbp
