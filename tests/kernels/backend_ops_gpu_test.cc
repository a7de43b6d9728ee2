// Every op of kernels/backend.h, forward and backward, on the CUDA backend
// against the CPU backend (the reference) on the same inputs, in the manner
// of ggml's test-backend-ops. Skipped without CUDA or a device.
//
// For each case (tests/kernels/backend_test_util.h):
//   * f32: CUDA with f32 storage matches the CPU to kF32Tol (normwise
//     relative error per output);
//   * bf16: CUDA with bf16 activations must be at most twice as far from the
//     f32 CPU reference as the same computation done in bf16 on the CPU
//     reference path (inputs and outputs rounded to bf16), plus kF32Tol: the
//     rule flash-attention's tests use for bf16 kernels.
// Shapes cover the edge cases of each kernel: rows and heads not multiples
// of the tile sizes, query offsets with unused trailing keys, single rows,
// GQA groups, head dims 16/64/80/128 (generic and tensor-core attention),
// a 151936-wide vocabulary, in-place aliases and accumulation, and packed
// documents (RoPE and attention with document offsets).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kernels/compute_device.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/device_info.h"
#include "tests/kernels/backend_test_util.h"

namespace sbp {
namespace {

using backend_test::Arg;
using backend_test::Args;
using backend_test::Kind;
using backend_test::OpCase;
using backend_test::RunResult;
using backend_test::Unwritten;
using op_test::RandomInts;
using op_test::RandomTensor;
using op_test::RelErr;
using op_test::Vec;

constexpr double kF32Tol = 2e-5;

// The two CUDA backends (f32 and bf16 activations) and the CPU reference,
// opened once for the whole binary.
struct Backends {
  ComputeDevice cpu, cuda_f32, cuda_bf16;
  bool ok = false;
};

Backends& Get() {
  static Backends* backends = [] {
    auto* b = new Backends;
    auto cpu = OpenComputeDevice("cpu", DType::kF32);
    CHECK_OK(cpu.status());
    b->cpu = *std::move(cpu);
    if (CudaDeviceCount() == 0) {
      // Without a device, SBP_BACKEND_TEST_SELF_CHECK=1 runs the harness and
      // every case with the CPU backend on both sides (a check of the test).
      const char* self_check = std::getenv("SBP_BACKEND_TEST_SELF_CHECK");
      if (self_check == nullptr || std::string(self_check) != "1") return b;
      for (ComputeDevice* d : {&b->cuda_f32, &b->cuda_bf16}) {
        auto cpu_again = OpenComputeDevice("cpu", DType::kF32);
        CHECK_OK(cpu_again.status());
        *d = *std::move(cpu_again);
      }
      b->ok = true;
      return b;
    }
    auto f32 = OpenComputeDevice("cuda:0", DType::kF32);
    auto bf16 = OpenComputeDevice("cuda:0", DType::kBF16);
    CHECK_OK(f32.status());
    CHECK_OK(bf16.status());
    b->cuda_f32 = *std::move(f32);
    b->cuda_bf16 = *std::move(bf16);
    b->ok = true;
    return b;
  }();
  return *backends;
}

Arg In(const std::string& name, Kind kind, Tensor init) {
  return Arg{name, kind, std::move(init), false};
}
Arg OutArg(const std::string& name, Kind kind, Tensor init) {
  return Arg{name, kind, std::move(init), true};
}

// ---- the cases ---------------------------------------------------------------

void AddEmbeddingCases(std::vector<OpCase>& cases) {
  const int64_t v = 50, h = 24, t = 37;
  cases.push_back({"embedding_forward",
                   {In("table", Kind::kAct, RandomTensor({v, h}, 1)),
                    In("ids", Kind::kI32, RandomInts({t}, 2, 0, v)),
                    OutArg("out", Kind::kAct, Unwritten({t, h}))},
                   [](Backend& b, Args& a) {
                     b.EmbeddingForward(a["table"], a["ids"], a["out"]);
                     return 0.0;
                   }});
  cases.push_back({"embedding_backward",
                   {In("ids", Kind::kI32, RandomInts({t}, 3, 0, 10)),  // many repeats
                    In("dout", Kind::kAct, RandomTensor({t, h}, 4)),
                    OutArg("dtable", Kind::kF32, RandomTensor({v, h}, 5))},
                   [](Backend& b, Args& a) {
                     b.EmbeddingBackward(a["ids"], a["dout"], a["dtable"]);
                     return 0.0;
                   }});
}

void AddRmsNormCases(std::vector<OpCase>& cases) {
  const float eps = 1e-6f;
  for (const Shape& shape : {Shape{13, 96}, Shape{5, 4, 16}, Shape{3, 1030}}) {
    const std::string tag = ShapeString(shape);
    const int64_t d = shape.back();
    Tensor x = RandomTensor(shape, 11, 2.0f);
    Tensor w = RandomTensor({d}, 12);
    const int64_t rows = x.numel() / d;
    cases.push_back(
        {"rms_norm_forward" + tag,
         {In("x", Kind::kAct, x), In("w", Kind::kAct, w), OutArg("y", Kind::kAct, Unwritten(shape)),
          OutArg("rstd", Kind::kF32, Unwritten({rows}))},
         [eps](Backend& b, Args& a) {
           b.RmsNormForward(a["x"], a["w"], eps, a["y"], &a["rstd"]);
           return 0.0;
         }});
    cases.push_back({"rms_norm_forward_in_place" + tag,
                     {OutArg("x", Kind::kAct, x), In("w", Kind::kAct, w)},
                     [eps](Backend& b, Args& a) {
                       b.RmsNormForward(a["x"], a["w"], eps, a["x"], nullptr);
                       return 0.0;
                     }});
    // rstd from the f32 forward, as the engine saves it.
    Tensor y = op_test::NewTensor(shape);
    Tensor rstd = op_test::NewTensor({rows});
    cpu::RmsNormForward(x, w, eps, y, &rstd);
    Tensor dy = RandomTensor(shape, 13);
    cases.push_back({"rms_norm_backward" + tag,
                     {In("x", Kind::kAct, x), In("w", Kind::kAct, w), In("rstd", Kind::kF32, rstd),
                      In("dy", Kind::kAct, dy), OutArg("dx", Kind::kAct, Unwritten(shape)),
                      OutArg("dw", Kind::kF32, RandomTensor({d}, 14))},
                     [](Backend& b, Args& a) {
                       b.RmsNormBackward(a["x"], a["w"], a["rstd"], a["dy"], a["dx"], a["dw"]);
                       return 0.0;
                     }});
    cases.push_back(
        {"rms_norm_backward_in_place" + tag,
         {In("x", Kind::kAct, x), In("w", Kind::kAct, w), In("rstd", Kind::kF32, rstd),
          OutArg("dy", Kind::kAct, dy), OutArg("dw", Kind::kF32, RandomTensor({d}, 14))},
         [](Backend& b, Args& a) {
           b.RmsNormBackward(a["x"], a["w"], a["rstd"], a["dy"], a["dy"], a["dw"]);
           return 0.0;
         }});
  }
}

void AddRopeCases(std::vector<OpCase>& cases) {
  struct RopeCase {
    Shape shape;
    int64_t offset;
    double theta;
    double attention_scaling;
  };
  for (const RopeCase& r :
       {RopeCase{{11, 3, 32}, 5, 1e4, 1.0}, RopeCase{{7, 2, 128}, 40000, 1e6, 1.0},
        RopeCase{{4, 1, 16}, 0, 1e6, 1.0}, RopeCase{{9, 2, 64}, 70000, 5e5, 1.1386}}) {
    RopeTable table = PlainRopeTable(r.shape[2], r.theta);
    table.attention_scaling = r.attention_scaling;
    // A table that is not a plain power law (as llama3 / yarn scaling makes).
    if (r.attention_scaling != 1.0) {
      for (size_t i = 0; i < table.inv_freq.size(); i += 2) table.inv_freq[i] /= 8.0;
    }
    const std::string tag = ShapeString(r.shape) + "_offset" + std::to_string(r.offset) +
                            (r.attention_scaling != 1.0 ? "_scaled" : "");
    for (bool backward : {false, true}) {
      cases.push_back({std::string(backward ? "rope_backward" : "rope_forward") + tag,
                       {OutArg("x", Kind::kAct, RandomTensor(r.shape, 21))},
                       [r, table, backward](Backend& b, Args& a) {
                         if (backward) {
                           b.RopeBackward(a["x"], r.offset, table);
                         } else {
                           b.RopeForward(a["x"], r.offset, table);
                         }
                         return 0.0;
                       }});
    }
  }
}

void AddMatmulCases(std::vector<OpCase>& cases) {
  struct Mm {
    int64_t n, k, m;
  };
  for (const Mm& s : {Mm{33, 48, 40}, Mm{64, 128, 1000}, Mm{1, 16, 8}}) {
    const std::string tag =
        "_n" + std::to_string(s.n) + "k" + std::to_string(s.k) + "m" + std::to_string(s.m);
    Tensor x = RandomTensor({s.n, s.k}, 31);
    Tensor w = RandomTensor({s.m, s.k}, 32, 0.1f);
    Tensor dy = RandomTensor({s.n, s.m}, 33);
    for (bool acc : {false, true}) {
      const std::string a_tag = tag + (acc ? "_accumulate" : "");
      cases.push_back(
          {"matmul_xwt" + a_tag,
           {In("x", Kind::kAct, x), In("w", Kind::kAct, w),
            OutArg("y", Kind::kAct, acc ? RandomTensor({s.n, s.m}, 34) : Unwritten({s.n, s.m}))},
           [acc](Backend& b, Args& a) {
             b.MatmulXWt(a["x"], a["w"], a["y"], acc);
             return 0.0;
           }});
      cases.push_back(
          {"matmul_dyw" + a_tag,
           {In("dy", Kind::kAct, dy), In("w", Kind::kAct, w),
            OutArg("dx", Kind::kAct, acc ? RandomTensor({s.n, s.k}, 35) : Unwritten({s.n, s.k}))},
           [acc](Backend& b, Args& a) {
             b.MatmulDyW(a["dy"], a["w"], a["dx"], acc);
             return 0.0;
           }});
    }
    cases.push_back({"matmul_accum_dytx" + tag,
                     {In("dy", Kind::kAct, dy), In("x", Kind::kAct, x),
                      OutArg("dw", Kind::kF32, RandomTensor({s.m, s.k}, 36))},
                     [](Backend& b, Args& a) {
                       b.MatmulAccumDyTX(a["dy"], a["x"], a["dw"]);
                       return 0.0;
                     }});
    // dK/dV are f32 accumulators meeting bf16 activations in the engine.
    cases.push_back({"matmul_accum_dytx_mixed" + tag,
                     {In("dy", Kind::kF32, dy), In("x", Kind::kAct, x),
                      OutArg("dw", Kind::kF32, RandomTensor({s.m, s.k}, 36))},
                     [](Backend& b, Args& a) {
                       b.MatmulAccumDyTX(a["dy"], a["x"], a["dw"]);
                       return 0.0;
                     }});
  }
  cases.push_back({"add_bias",
                   {OutArg("y", Kind::kAct, RandomTensor({7, 3, 20}, 37)),
                    In("bias", Kind::kAct, RandomTensor({20}, 38))},
                   [](Backend& b, Args& a) {
                     b.AddBias(a["y"], a["bias"]);
                     return 0.0;
                   }});
  cases.push_back({"bias_backward",
                   {In("dy", Kind::kAct, RandomTensor({70, 3, 20}, 39)),
                    OutArg("dbias", Kind::kF32, RandomTensor({20}, 40))},
                   [](Backend& b, Args& a) {
                     b.BiasBackward(a["dy"], a["dbias"]);
                     return 0.0;
                   }});
}

struct AttnDims {
  int64_t tq, tk, hq, hkv, d, q_offset;
  std::string Tag() const {
    return "_tq" + std::to_string(tq) + "tk" + std::to_string(tk) + "hq" + std::to_string(hq) +
           "hkv" + std::to_string(hkv) + "d" + std::to_string(d) + "off" + std::to_string(q_offset);
  }
};

const std::vector<AttnDims>& AttentionShapes() {
  static const std::vector<AttnDims> shapes = {
      {37, 37, 4, 2, 16, 0},      // generic, GQA 2
      {50, 90, 4, 1, 16, 40},     // generic, offset, multi-query
      {100, 100, 4, 2, 64, 0},    // tensor cores d64 (bf16), tq not a tile multiple
      {70, 230, 8, 2, 128, 130},  // tensor cores d128, offset, unused trailing keys
      {129, 129, 2, 2, 128, 0},   // one row past two tiles
      {1, 65, 2, 1, 64, 64},      // a single query row
      {200, 300, 2, 1, 80, 100},  // generic head dim 80
      {64, 64, 1, 1, 256, 0},     // generic, the largest head dim
  };
  return shapes;
}

void AddAttentionCases(std::vector<OpCase>& cases) {
  for (const AttnDims& s : AttentionShapes()) {
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.d)));
    Tensor q = RandomTensor({s.tq, s.hq, s.d}, 51);
    Tensor k = RandomTensor({s.tk, s.hkv, s.d}, 52);
    Tensor v = RandomTensor({s.tk, s.hkv, s.d}, 53);
    cases.push_back({"attention_forward" + s.Tag(),
                     {In("q", Kind::kAct, q), In("k", Kind::kAct, k), In("v", Kind::kAct, v),
                      OutArg("out", Kind::kAct, Unwritten({s.tq, s.hq, s.d})),
                      OutArg("lse", Kind::kF32, Unwritten({s.tq, s.hq}))},
                     [s, scale](Backend& b, Args& a) {
                       b.AttentionForward(a["q"], a["k"], a["v"], s.q_offset, scale, a["out"],
                                          &a["lse"]);
                       return 0.0;
                     }});
    // out and lse from the f32 forward, as the engine saves them.
    Tensor out = op_test::NewTensor({s.tq, s.hq, s.d});
    Tensor lse = op_test::NewTensor({s.tq, s.hq});
    cpu::AttentionForward(q, k, v, s.q_offset, scale, out, &lse);
    Tensor dout = RandomTensor({s.tq, s.hq, s.d}, 54);
    for (Kind kv_kind : {Kind::kF32, Kind::kAct}) {
      const std::string kind_tag = kv_kind == Kind::kF32 ? "_dkv_f32" : "_dkv_act";
      cases.push_back(
          {"attention_backward" + s.Tag() + kind_tag,
           {In("q", Kind::kAct, q), In("k", Kind::kAct, k), In("v", Kind::kAct, v),
            In("out", Kind::kAct, out), In("dout", Kind::kAct, dout), In("lse", Kind::kF32, lse),
            OutArg("dq", Kind::kAct, Unwritten({s.tq, s.hq, s.d})),
            OutArg("dk", kv_kind, RandomTensor({s.tk, s.hkv, s.d}, 55, 0.1f)),
            OutArg("dv", kv_kind, RandomTensor({s.tk, s.hkv, s.d}, 56, 0.1f))},
           [s, scale](Backend& b, Args& a) {
             b.AttentionBackward(a["q"], a["k"], a["v"], a["out"], a["dout"], a["lse"], s.q_offset,
                                 scale, a["dq"], a["dk"], a["dv"]);
             return 0.0;
           }});
    }
  }
}

// Packed documents (kernels/documents.h): RoPE positions restart per
// document, attention is block-diagonal causal; chunks (q_offset) cut
// documents, documents straddle the 32- and 64-row tiles of both kernels.
void AddPackedDocumentCases(std::vector<OpCase>& cases) {
  using op_test::FromInts;
  const Tensor docs = FromInts({6}, {0, 3, 70, 71, 150, 230});
  const RopeTable table = PlainRopeTable(64, 1e6);
  for (bool backward : {false, true}) {
    cases.push_back(
        {std::string(backward ? "rope_backward" : "rope_forward") + "_documents",
         {OutArg("x", Kind::kAct, RandomTensor({150, 2, 64}, 22)), In("docs", Kind::kI32, docs)},
         [table, backward](Backend& b, Args& a) {
           if (backward) {
             b.RopeBackward(a["x"], 60, table, &a["docs"]);
           } else {
             b.RopeForward(a["x"], 60, table, &a["docs"]);
           }
           return 0.0;
         }});
  }
  // {tq, tk, hq, hkv, d, q_offset}: whole sequence and a chunk, generic
  // (d 16, 80) and tensor-core (d 64, 128) kernels.
  for (const AttnDims& s : {AttnDims{230, 230, 4, 2, 16, 0}, AttnDims{100, 230, 4, 2, 16, 60},
                            AttnDims{230, 230, 4, 2, 64, 0}, AttnDims{100, 230, 4, 1, 128, 60},
                            AttnDims{150, 230, 2, 2, 80, 80}}) {
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.d)));
    Tensor q = RandomTensor({s.tq, s.hq, s.d}, 57);
    Tensor k = RandomTensor({s.tk, s.hkv, s.d}, 58);
    Tensor v = RandomTensor({s.tk, s.hkv, s.d}, 59);
    cases.push_back(
        {"attention_forward_documents" + s.Tag(),
         {In("q", Kind::kAct, q), In("k", Kind::kAct, k), In("v", Kind::kAct, v),
          In("docs", Kind::kI32, docs), OutArg("out", Kind::kAct, Unwritten({s.tq, s.hq, s.d})),
          OutArg("lse", Kind::kF32, Unwritten({s.tq, s.hq}))},
         [s, scale](Backend& b, Args& a) {
           b.AttentionForward(a["q"], a["k"], a["v"], s.q_offset, scale, a["out"], &a["lse"],
                              &a["docs"]);
           return 0.0;
         }});
    Tensor out = op_test::NewTensor({s.tq, s.hq, s.d});
    Tensor lse = op_test::NewTensor({s.tq, s.hq});
    cpu::AttentionForward(q, k, v, s.q_offset, scale, out, &lse, &docs);
    cases.push_back(
        {"attention_backward_documents" + s.Tag(),
         {In("q", Kind::kAct, q), In("k", Kind::kAct, k), In("v", Kind::kAct, v),
          In("out", Kind::kAct, out), In("dout", Kind::kAct, RandomTensor({s.tq, s.hq, s.d}, 60)),
          In("lse", Kind::kF32, lse), In("docs", Kind::kI32, docs),
          OutArg("dq", Kind::kAct, Unwritten({s.tq, s.hq, s.d})),
          OutArg("dk", Kind::kF32, RandomTensor({s.tk, s.hkv, s.d}, 61, 0.1f)),
          OutArg("dv", Kind::kF32, RandomTensor({s.tk, s.hkv, s.d}, 62, 0.1f))},
         [s, scale](Backend& b, Args& a) {
           b.AttentionBackward(a["q"], a["k"], a["v"], a["out"], a["dout"], a["lse"], s.q_offset,
                               scale, a["dq"], a["dk"], a["dv"], &a["docs"]);
           return 0.0;
         }});
  }
}

void AddSwigluCases(std::vector<OpCase>& cases) {
  Tensor gate = RandomTensor({17, 40}, 61, 2.0f);
  Tensor up = RandomTensor({17, 40}, 62);
  Tensor dout = RandomTensor({17, 40}, 63);
  cases.push_back({"swiglu_forward",
                   {In("gate", Kind::kAct, gate), In("up", Kind::kAct, up),
                    OutArg("out", Kind::kAct, Unwritten({17, 40}))},
                   [](Backend& b, Args& a) {
                     b.SwigluForward(a["gate"], a["up"], a["out"]);
                     return 0.0;
                   }});
  cases.push_back({"swiglu_backward_in_place",
                   {OutArg("gate", Kind::kAct, gate), OutArg("up", Kind::kAct, up),
                    In("dout", Kind::kAct, dout)},
                   [](Backend& b, Args& a) {
                     b.SwigluBackward(a["gate"], a["up"], a["dout"], a["gate"], a["up"]);
                     return 0.0;
                   }});
}

void AddCrossEntropyCases(std::vector<OpCase>& cases) {
  for (int64_t vocab : {int64_t{1000}, int64_t{151936}}) {
    const int64_t n = vocab > 1000 ? 3 : 9;
    const std::string tag = "_v" + std::to_string(vocab);
    Tensor logits = RandomTensor({n, vocab}, 71, 3.0f);
    Tensor targets = RandomInts({n}, 72, 0, static_cast<int32_t>(vocab));
    targets.data<int32_t>()[1] = cpu::kIgnoreIndex;
    OpCase fused{"cross_entropy" + tag,
                 {OutArg("logits", Kind::kAct, logits), In("targets", Kind::kI32, targets)},
                 [](Backend& b, Args& a) {
                   return b.CrossEntropyForwardBackward(a["logits"], a["targets"], 0.25f);
                 }};
    fused.has_scalar = true;
    cases.push_back(fused);
    cases.push_back({"log_probs_forward" + tag,
                     {In("logits", Kind::kAct, logits), In("targets", Kind::kI32, targets),
                      OutArg("logprobs", Kind::kF32, Unwritten({n})),
                      OutArg("lse", Kind::kF32, Unwritten({n}))},
                     [](Backend& b, Args& a) {
                       b.LogProbsForward(a["logits"], a["targets"], a["logprobs"], a["lse"]);
                       return 0.0;
                     }});
    Tensor logprobs = op_test::NewTensor({n});
    Tensor lse = op_test::NewTensor({n});
    cpu::LogProbsForward(logits, targets, logprobs, lse);
    cases.push_back(
        {"log_probs_backward" + tag,
         {OutArg("logits", Kind::kAct, logits), In("targets", Kind::kI32, targets),
          In("lse", Kind::kF32, lse), In("dlogprobs", Kind::kF32, RandomTensor({n}, 73))},
         [](Backend& b, Args& a) {
           b.LogProbsBackward(a["logits"], a["targets"], a["lse"], a["dlogprobs"]);
           return 0.0;
         }});
  }
}

void AddOptimizerAndElementwiseCases(std::vector<OpCase>& cases) {
  const int64_t n = 100003;
  cases.push_back({"adamw",
                   {OutArg("p", Kind::kF32, RandomTensor({n}, 81)),
                    In("g", Kind::kF32, RandomTensor({n}, 82, 0.01f)),
                    OutArg("m", Kind::kF32, RandomTensor({n}, 83, 0.01f)),
                    OutArg("v", Kind::kF32,
                           [] {
                             Tensor t = RandomTensor({100003}, 84, 1e-4f);
                             for (int64_t i = 0; i < t.numel(); ++i) {
                               t.data<float>()[i] = std::abs(t.data<float>()[i]);
                             }
                             return t;
                           }())},
                   [](Backend& b, Args& a) {
                     AdamWParams params;
                     params.lr = 1e-3;
                     params.weight_decay = 0.1;
                     params.step = 3;
                     params.grad_scale = 0.5f;
                     b.AdamW(a["p"], a["g"], a["m"], a["v"], params);
                     return 0.0;
                   }});
  OpCase sum_squares{"sum_squares",
                     {In("x", Kind::kAct, RandomTensor({n}, 85))},
                     [](Backend& b, Args& a) { return b.SumSquares(a["x"]); }};
  sum_squares.has_scalar = true;
  cases.push_back(sum_squares);
  OpCase sum_squares_f32{"sum_squares_f32",
                         {In("x", Kind::kF32, RandomTensor({n}, 86))},
                         [](Backend& b, Args& a) { return b.SumSquares(a["x"]); }};
  sum_squares_f32.has_scalar = true;
  cases.push_back(sum_squares_f32);
  Tensor a0 = RandomTensor({3, 1001}, 87), b0 = RandomTensor({3, 1001}, 88);
  cases.push_back({"add",
                   {In("a", Kind::kAct, a0), In("b", Kind::kAct, b0),
                    OutArg("out", Kind::kAct, Unwritten({3, 1001}))},
                   [](Backend& b, Args& a) {
                     b.Add(a["a"], a["b"], a["out"]);
                     return 0.0;
                   }});
  cases.push_back({"add_in_place",
                   {OutArg("a", Kind::kAct, a0), In("b", Kind::kAct, b0)},
                   [](Backend& b, Args& a) {
                     b.Add(a["a"], a["b"], a["a"]);
                     return 0.0;
                   }});
  cases.push_back(
      {"axpy", {In("x", Kind::kAct, a0), OutArg("y", Kind::kAct, b0)}, [](Backend& b, Args& a) {
         b.Axpy(-0.75f, a["x"], a["y"]);
         return 0.0;
       }});
  cases.push_back({"scale", {OutArg("x", Kind::kAct, a0)}, [](Backend& b, Args& a) {
                     b.Scale(a["x"], 1.5f);
                     return 0.0;
                   }});
  cases.push_back({"fill",
                   {OutArg("x", Kind::kAct, Unwritten({3, 1001})),
                    OutArg("i", Kind::kI32, RandomInts({77}, 89, 0, 5))},
                   [](Backend& b, Args& a) {
                     b.Fill(a["x"], 0.3f);
                     b.Fill(a["i"], -100.0f);
                     return 0.0;
                   }});
  // Cast between an activation (bf16 in the bf16 runs) and an f32 tensor.
  cases.push_back({"cast_to_f32",
                   {In("src", Kind::kAct, a0), OutArg("dst", Kind::kF32, Unwritten({3, 1001}))},
                   [](Backend& b, Args& a) {
                     b.Cast(a["src"], a["dst"]);
                     return 0.0;
                   }});
  cases.push_back({"cast_from_f32",
                   {In("src", Kind::kF32, a0), OutArg("dst", Kind::kAct, Unwritten({3, 1001}))},
                   [](Backend& b, Args& a) {
                     b.Cast(a["src"], a["dst"]);
                     return 0.0;
                   }});
}

std::vector<OpCase> AllCases() {
  std::vector<OpCase> cases;
  AddEmbeddingCases(cases);
  AddRmsNormCases(cases);
  AddRopeCases(cases);
  AddMatmulCases(cases);
  AddAttentionCases(cases);
  AddPackedDocumentCases(cases);
  AddSwigluCases(cases);
  AddCrossEntropyCases(cases);
  AddOptimizerAndElementwiseCases(cases);
  return cases;
}

const std::vector<OpCase>& Cases() {
  static const std::vector<OpCase>* cases = new std::vector<OpCase>(AllCases());
  return *cases;
}

// ---- the comparison ------------------------------------------------------------

class BackendOpsTest : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    if (!Get().ok) GTEST_SKIP() << "no CUDA device (" << CudaSupportSummary() << ")";
  }
};

TEST_P(BackendOpsTest, CudaMatchesCpu) {
  const OpCase& c = Cases()[GetParam()];
  Backends& b = Get();
  const RunResult ref = backend_test::Run(c, *b.cpu.backend, /*bf16=*/false);
  const RunResult emu = backend_test::Run(c, *b.cpu.backend, /*bf16=*/true);
  const RunResult f32 = backend_test::Run(c, *b.cuda_f32.backend, /*bf16=*/false);
  const RunResult bf16 = backend_test::Run(c, *b.cuda_bf16.backend, /*bf16=*/true);
  auto check = [&](const std::string& what, const Vec& want, const Vec& emu_v, const Vec& f32_v,
                   const Vec& bf16_v) {
    const double f32_err = RelErr(f32_v, want);
    const double emu_err = RelErr(emu_v, want);
    const double bf16_err = RelErr(bf16_v, want);
    std::printf("op %-60s %-9s f32 %.2e  bf16 %.2e  cpu-bf16 %.2e  ratio %.2f\n", c.name.c_str(),
                what.c_str(), f32_err, bf16_err, emu_err, bf16_err / std::max(emu_err, 1e-30));
    EXPECT_LE(f32_err, kF32Tol) << c.name << " " << what << " (f32 storage)";
    EXPECT_LE(bf16_err, 2.0 * emu_err + kF32Tol)
        << c.name << " " << what << " (bf16 storage; the CPU's bf16 error is " << emu_err << ")";
  };
  for (const auto& [name, want] : ref.outputs) {
    check(name, want, emu.outputs.at(name), f32.outputs.at(name), bf16.outputs.at(name));
  }
  if (c.has_scalar) {
    check("scalar", {ref.scalar}, {emu.scalar}, {f32.scalar}, {bf16.scalar});
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, BackendOpsTest, ::testing::Range<size_t>(0, Cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string name = Cases()[info.param].name;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace sbp
