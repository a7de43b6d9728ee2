// sbp-bench-kernels: throughput of the CPU kernels that dominate training,
// as fractions of this machine's plain OpenBLAS sgemm peak measured in the
// same run. Prints one JSON line per measurement:
//   {"op", "shape", "seconds", "gflops", "fraction_of_sgemm", "cpu_seconds", "contended", ...}
// (attention lines add "tokens_per_second"). "seconds" is the best wall time
// over the runs, "cpu_seconds" the process CPU time of that run, and
// "contended" says that run had well under the thread count in CPU seconds
// per second: the cores were shared with other work (runs are repeated for a
// while to find an uncontended one).
//
// FLOP conventions: a GEMM is 2*M*N*K. Causal attention counts only the
// (query, key) pairs on or below the diagonal: forward = 4*d per pair per
// query head (QK^T and PV); backward = 2.5x forward (five GEMMs against two),
// so forward+backward = 3.5x forward. Recomputing P in the backward is not
// counted.
//
// Usage: sbp-bench-kernels [--quick] [--filter=SUBSTRING] [--micro-isa=avx2|avx512]
//   --quick      shorter sequences and fewer repeats (a smoke run, ~10 s)
//   --filter     only measurements whose op name contains SUBSTRING (the sgemm
//                peak is always measured)
//   --micro-isa  the attention micro-kernels' width (default: the widest this
//                CPU has), e.g. avx2 on an AVX-512 CPU for an AVX2 machine's
//                kernels
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "kernels/allocator.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_micro.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/openblas_core.h"
#include "kernels/random.h"
#include "kernels/tensor.h"

namespace sbp {
namespace {

struct Options {
  bool quick = false;
  std::string filter;
};

CpuAllocator& Alloc() {
  static CpuAllocator* alloc = new CpuAllocator();
  return *alloc;
}

Tensor Random(Shape shape, uint64_t seed) {
  auto t = Tensor::Empty(Alloc(), std::move(shape), DType::kF32, "bench tensor");
  CHECK_OK(t.status());
  FillNormal(*t, seed, 0.0f, 1.0f);
  return *std::move(t);
}

double WallNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double CpuNow() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double seconds = 1e30;   // best wall time
  double cpu_seconds = 0;  // process CPU time of that run
  // Whether that run had less than ~all threads' worth of CPU: the cores were
  // shared with other work, so the figure is a lower bound.
  bool Contended() const { return cpu_seconds < 0.85 * omp_get_max_threads() * seconds; }
};

// Best wall time of `fn` over the runs after one warm-up (itself counted when
// it is slow): at least `min_runs` more, and more until `budget_s` seconds
// have been spent; while the best run is contended, more runs up to 5x the
// budget.
Timing Measure(const std::function<void()>& fn, int min_runs, double budget_s) {
  Timing best;
  auto run_once = [&] {
    const double wall = WallNow(), cpu = CpuNow();
    fn();
    const double seconds = WallNow() - wall;
    if (seconds < best.seconds) best = {seconds, CpuNow() - cpu};
  };
  const double start = WallNow();
  run_once();
  if (best.seconds < 0.5 * budget_s) best = Timing();  // a fast warm-up does not count
  for (int run = 0;; ++run) {
    const double elapsed = WallNow() - start;
    const bool more = run < min_runs || (elapsed < budget_s && run < 100) ||
                      (best.Contended() && elapsed < 5 * budget_s);
    if (!more) break;
    run_once();
  }
  return best;
}

class Reporter {
 public:
  explicit Reporter(const Options& options) : options_(options) {}

  bool Wanted(const std::string& op) const {
    return options_.filter.empty() || op.find(options_.filter) != std::string::npos;
  }
  void set_sgemm_gflops(double gflops) { sgemm_gflops_ = gflops; }

  void Print(const std::string& op, const std::string& shape, const Timing& timing, double flops,
             const std::string& extra = "") const {
    const double gflops = flops / timing.seconds / 1e9;
    std::printf(
        "{\"op\": \"%s\", \"shape\": \"%s\", \"seconds\": %.6f, \"gflops\": %.2f, "
        "\"fraction_of_sgemm\": %.3f, \"cpu_seconds\": %.6f, \"contended\": %s%s}\n",
        op.c_str(), shape.c_str(), timing.seconds, gflops,
        sgemm_gflops_ > 0 ? gflops / sgemm_gflops_ : 0.0, timing.cpu_seconds,
        timing.Contended() ? "true" : "false", extra.c_str());
    std::fflush(stdout);
  }

 private:
  const Options& options_;
  double sgemm_gflops_ = 0;
};

// ---- plain sgemm: the reference peak ------------------------------------------

void BenchSgemmPeak(const Options& options, Reporter& reporter) {
  const int n = options.quick ? 1024 : 2048;
  const Tensor a = Random({n, n}, 1), b = Random({n, n}, 2);
  Tensor c = Random({n, n}, 3);
  const Timing timing = Measure(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n,
                    b.data<float>(), n, 0.0f, c.data<float>(), n);
      },
      options.quick ? 3 : 5, options.quick ? 0.5 : 2.0);
  const double flops = 2.0 * n * n * n;
  reporter.set_sgemm_gflops(flops / timing.seconds / 1e9);
  const std::string shape = std::to_string(n) + "x" + std::to_string(n) + "x" + std::to_string(n);
  const std::string core = openblas_get_corename();
  char extra[256];
  std::snprintf(extra, sizeof(extra),
                ", \"threads\": %d, \"openblas_core\": \"%s\", \"openblas_config\": \"%s\"",
                omp_get_max_threads(), core.c_str(), openblas_get_config());
  reporter.Print("sgemm", shape, timing, flops, extra);
#if defined(__GNUC__) && defined(__x86_64__)
  // OpenBLAS 0.3.21 does not know recent Xeons and falls back to SSE3 kernels.
  if (__builtin_cpu_supports("avx512f") && core.find("kylake") == std::string::npos &&
      core.find("ooper") == std::string::npos && core.find("apphire") == std::string::npos) {
    std::fprintf(stderr,
                 "warning: this CPU has AVX-512 but OpenBLAS chose its '%s' kernels; "
                 "OPENBLAS_CORETYPE=SkylakeX makes sgemm several times faster\n",
                 core.c_str());
  }
#endif
}

// ---- the three matmul layouts of a linear layer -----------------------------

void BenchMatmul(const Options& options, const Reporter& reporter) {
  const int64_t n = options.quick ? 1024 : 4096;
  struct Layer {
    int64_t k, m;  // in_features, out_features
  };
  const std::vector<Layer> layers =
      options.quick ? std::vector<Layer>{{1024, 1024}}
                    : std::vector<Layer>{{1024, 1024}, {1024, 4096}, {4096, 1024}};
  const double budget = options.quick ? 0.3 : 1.0;
  for (const Layer& layer : layers) {
    const Tensor x = Random({n, layer.k}, 10), w = Random({layer.m, layer.k}, 11);
    const Tensor dy = Random({n, layer.m}, 12);
    Tensor y = Random({n, layer.m}, 13), dx = Random({n, layer.k}, 14);
    Tensor dw = Random({layer.m, layer.k}, 15);
    const std::string shape = "N=" + std::to_string(n) + " K=" + std::to_string(layer.k) +
                              " M=" + std::to_string(layer.m);
    const double flops = 2.0 * n * layer.k * layer.m;
    if (reporter.Wanted("matmul_xwt")) {
      reporter.Print("matmul_xwt", shape,
                     Measure([&] { cpu::MatmulXWt(x, w, y, false); }, 1, budget), flops);
    }
    if (reporter.Wanted("matmul_dyw")) {
      reporter.Print("matmul_dyw", shape,
                     Measure([&] { cpu::MatmulDyW(dy, w, dx, false); }, 1, budget), flops);
    }
    if (reporter.Wanted("matmul_accum_dytx")) {
      reporter.Print("matmul_accum_dytx", shape,
                     Measure([&] { cpu::MatmulAccumDyTX(dy, x, dw); }, 1, budget), flops);
    }
  }
}

// ---- the LM head of one logits chunk -------------------------------------------

// The three GEMMs of one logits chunk of the engine's LM head (rows of the
// chunk x hidden H x vocabulary V; bench-qwen3's head, 512-row chunks):
//   logits [rows, V] = x W^T,  dW [V, H] += dlogits^T x,  dx [rows, H] = dlogits W.
// Each call packs its operands afresh: W (V x H, 311 MB here) in the first
// and the third, the logits chunk in the second and the third. The
// lm_head_*_t lines are the same products with the big operand in the other
// position (logits^T = W x^T, dx^T = W^T dlogits^T), to see which layout
// OpenBLAS streams best.
void BenchLmHead(const Options& options, const Reporter& reporter) {
  if (!reporter.Wanted("lm_head")) return;
  const int64_t rows = 512, H = 512, V = options.quick ? 32768 : 151936;
  const Tensor x = Random({rows, H}, 40), w = Random({V, H}, 41);
  Tensor logits = Random({rows, V}, 42), dw = Random({V, H}, 43), dx = Random({rows, H}, 44);
  Tensor logits_t = Random({V, rows}, 45), dx_t = Random({H, rows}, 46);
  const std::string shape =
      "rows=" + std::to_string(rows) + " H=" + std::to_string(H) + " V=" + std::to_string(V);
  const double flops = 2.0 * rows * H * V;
  const double budget = options.quick ? 0.3 : 1.5;
  auto bench = [&](const char* op, const std::function<void()>& fn) {
    if (reporter.Wanted(op)) reporter.Print(op, shape, Measure(fn, 2, budget), flops);
  };
  bench("lm_head_logits", [&] { cpu::MatmulXWt(x, w, logits, false); });
  bench("lm_head_dw", [&] { cpu::MatmulAccumDyTX(logits, x, dw); });
  bench("lm_head_dx", [&] { cpu::MatmulDyW(logits, w, dx, false); });
  bench("lm_head_logits_t", [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, V, rows, H, 1.0f, w.data<float>(), H,
                x.data<float>(), H, 0.0f, logits_t.data<float>(), rows);
  });
  bench("lm_head_dx_t", [&] {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, H, rows, V, 1.0f, w.data<float>(), H,
                logits.data<float>(), V, 0.0f, dx_t.data<float>(), rows);
  });
  // The whole chunk as the engine issues it (cross-entropy left out).
  if (reporter.Wanted("lm_head_chunk")) {
    reporter.Print("lm_head_chunk", shape,
                   Measure(
                       [&] {
                         cpu::MatmulXWt(x, w, logits, false);
                         cpu::MatmulAccumDyTX(logits, x, dw);
                         cpu::MatmulDyW(logits, w, dx, false);
                       },
                       2, budget),
                   3 * flops);
  }
}

// ---- causal GQA attention ----------------------------------------------------

struct AttentionCase {
  int64_t t, hq, hkv, d;
};

std::string AttentionShape(const AttentionCase& c) {
  return "T=" + std::to_string(c.t) + " Hq=" + std::to_string(c.hq) +
         " Hkv=" + std::to_string(c.hkv) + " d=" + std::to_string(c.d);
}

// Forward FLOPs of causal attention over the whole sequence.
double AttentionForwardFlops(const AttentionCase& c) {
  const double pairs = 0.5 * static_cast<double>(c.t) * static_cast<double>(c.t + 1);
  return 4.0 * static_cast<double>(c.d) * pairs * static_cast<double>(c.hq);
}

std::string TokensPerSecond(int64_t tokens, const Timing& timing) {
  char extra[64];
  std::snprintf(extra, sizeof(extra), ", \"tokens_per_second\": %.0f",
                static_cast<double>(tokens) / timing.seconds);
  return extra;
}

// The forward paths to measure: sgemm, and the micro-kernels where the CPU
// has them.
// The automatic choice (what the engine runs), then each path this CPU has.
std::vector<cpu::AttentionKernel> AttentionKernels() {
  std::vector<cpu::AttentionKernel> kernels = {cpu::AttentionKernel::kAuto,
                                               cpu::AttentionKernel::kBlas};
  if (cpu::attention_internal::MicroKernelSupported()) {
    kernels.push_back(cpu::AttentionKernel::kMicroKernel);
  }
  return kernels;
}

// The fields of a line that say which products ran: "attention_kernel"
// (auto, sgemm or micro), with auto the path each pass took for head_dim d,
// and the micro-kernels' ISA where they ran.
std::string AttentionKernelField(cpu::AttentionKernel kernel, int64_t d) {
  const std::string isa =
      cpu::attention_internal::MicroIsaName(cpu::attention_internal::MicroKernelIsa());
  auto path = [&](bool micro) {
    return micro ? "\"micro_" + isa + "\"" : std::string("\"sgemm\"");
  };
  switch (kernel) {
    case cpu::AttentionKernel::kAuto:
      return ", \"attention_kernel\": \"auto\", \"forward\": " +
             path(cpu::AttentionForwardUsesMicroKernel(d)) +
             ", \"backward\": " + path(cpu::AttentionBackwardUsesMicroKernel(d));
    case cpu::AttentionKernel::kBlas:
      return ", \"attention_kernel\": \"sgemm\"";
    case cpu::AttentionKernel::kMicroKernel:
      return ", \"attention_kernel\": \"micro\", \"micro_isa\": \"" + isa + "\"";
  }
  return "";
}

// Inputs and outputs of one attention problem (outputs start random: the
// backward accumulates into dk, dv and that does not change its speed).
struct AttentionBuffers {
  AttentionBuffers(const AttentionCase& c, int64_t out_rows)
      : q(Random({c.t, c.hq, c.d}, 20)),
        k(Random({c.t, c.hkv, c.d}, 21)),
        v(Random({c.t, c.hkv, c.d}, 22)),
        dout(Random({c.t, c.hq, c.d}, 23)),
        out(Random({out_rows, c.hq, c.d}, 24)),
        lse(Random({out_rows, c.hq}, 25)),
        dq(Random({out_rows, c.hq, c.d}, 26)),
        dk(Random({c.t, c.hkv, c.d}, 27)),
        dv(Random({c.t, c.hkv, c.d}, 28)),
        scale(1.0f / std::sqrt(static_cast<float>(c.d))) {}

  Tensor q, k, v, dout, out, lse, dq, dk, dv;
  float scale;
};

void BenchAttention(const Options& options, const Reporter& reporter) {
  std::vector<AttentionCase> cases;
  if (options.quick) {
    cases = {{1024, 8, 4, 64}, {1024, 8, 4, 128}};
  } else {
    // Fewer heads at long T keep the whole run to a few minutes; the
    // throughput per head does not depend on the head count.
    cases = {{1024, 8, 4, 64},  {2048, 8, 4, 64},  {4096, 4, 2, 64},  {8192, 2, 1, 64},
             {1024, 8, 4, 128}, {2048, 8, 4, 128}, {4096, 4, 2, 128}, {8192, 2, 1, 128}};
  }
  const double budget = options.quick ? 0.3 : 1.0;
  for (const AttentionCase& c : cases) {
    AttentionBuffers b(c, c.t);
    const double fwd_flops = AttentionForwardFlops(c);
    // Each attention path this CPU has, in the same run: sgemm per score tile,
    // and the micro-kernels (kernels/cpu/attention_micro.h).
    for (const cpu::AttentionKernel kernel : AttentionKernels()) {
      cpu::SetAttentionKernel(kernel);
      const std::string extra = AttentionKernelField(kernel, c.d);
      if (reporter.Wanted("attention_forward")) {
        const Timing timing = Measure(
            [&] { cpu::AttentionForward(b.q, b.k, b.v, 0, b.scale, b.out, &b.lse); }, 1, budget);
        reporter.Print("attention_forward", AttentionShape(c), timing, fwd_flops,
                       TokensPerSecond(c.t, timing) + extra);
      }
      if (reporter.Wanted("attention_fwd_bwd")) {
        const Timing timing = Measure(
            [&] {
              cpu::AttentionForward(b.q, b.k, b.v, 0, b.scale, b.out, &b.lse);
              cpu::AttentionBackward(b.q, b.k, b.v, b.out, b.dout, b.lse, 0, b.scale, b.dq, b.dk,
                                     b.dv);
            },
            1, budget);
        reporter.Print("attention_fwd_bwd", AttentionShape(c), timing, 3.5 * fwd_flops,
                       TokensPerSecond(c.t, timing) + extra);
      }
    }
    cpu::SetAttentionKernel(cpu::AttentionKernel::kAuto);
  }
}

// StreamBP's pattern: forward and backward of query chunks [s, s + chunk)
// against the whole K/V (q_offset = s), dk/dv summed over the chunks. Same
// FLOPs as the unchunked call; the ratio of the two shows the chunking cost.
void BenchChunkedAttention(const Options& options, const Reporter& reporter) {
  if (!reporter.Wanted("attention_fwd_bwd_chunked")) return;
  const AttentionCase c =
      options.quick ? AttentionCase{1024, 8, 4, 64} : AttentionCase{4096, 4, 2, 128};
  const int64_t chunk = options.quick ? 256 : 512;
  AttentionBuffers b(c, chunk);
  const Timing timing = Measure(
      [&] {
        for (int64_t begin = 0; begin < c.t; begin += chunk) {
          const int64_t rows = std::min(chunk, c.t - begin);
          Tensor out = b.out.Rows(0, rows), lse = b.lse.Rows(0, rows), dq = b.dq.Rows(0, rows);
          const Tensor q = b.q.Rows(begin, begin + rows), dout = b.dout.Rows(begin, begin + rows);
          cpu::AttentionForward(q, b.k, b.v, begin, b.scale, out, &lse);
          cpu::AttentionBackward(q, b.k, b.v, out, dout, lse, begin, b.scale, dq, b.dk, b.dv);
        }
      },
      1, options.quick ? 0.3 : 1.0);
  reporter.Print("attention_fwd_bwd_chunked", AttentionShape(c) + " chunk=" + std::to_string(chunk),
                 timing, 3.5 * AttentionForwardFlops(c), TokensPerSecond(c.t, timing));
}

// Packed documents: forward and backward over T tokens holding `docs` equal
// documents (block-diagonal causal through the document offsets) against the
// same call without them (one causal sequence). FLOPs count the attention
// that is computed: causal within each document, the whole triangle without.
void BenchPackedAttention(const Options& options, const Reporter& reporter) {
  if (!reporter.Wanted("attention_fwd_bwd_packed")) return;
  const AttentionCase c =
      options.quick ? AttentionCase{1024, 8, 4, 64} : AttentionCase{4096, 4, 2, 64};
  const int64_t docs = 16, length = c.t / docs;
  std::vector<int32_t> offsets;
  for (int64_t i = 0; i <= docs; ++i) offsets.push_back(static_cast<int32_t>(i * length));
  const Tensor offsets_t =
      Tensor::Wrap(offsets.data(), {static_cast<int64_t>(offsets.size())}, DType::kI32);
  AttentionBuffers b(c, c.t);
  const double budget = options.quick ? 0.3 : 1.0;
  for (bool packed : {true, false}) {
    const Tensor* d = packed ? &offsets_t : nullptr;
    const Timing timing = Measure(
        [&] {
          cpu::AttentionForward(b.q, b.k, b.v, 0, b.scale, b.out, &b.lse, d);
          cpu::AttentionBackward(b.q, b.k, b.v, b.out, b.dout, b.lse, 0, b.scale, b.dq, b.dk, b.dv,
                                 d);
        },
        1, budget);
    const double flops = packed ? docs * AttentionForwardFlops({length, c.hq, c.hkv, c.d})
                                : AttentionForwardFlops(c);
    reporter.Print("attention_fwd_bwd_packed",
                   AttentionShape(c) + (packed ? " docs=16" : " docs=1"), timing, 3.5 * flops,
                   TokensPerSecond(c.t, timing));
  }
}

int Main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      options.quick = true;
    } else if (arg.rfind("--filter=", 0) == 0) {
      options.filter = arg.substr(std::strlen("--filter="));
    } else if (arg == "--micro-isa=avx2" || arg == "--micro-isa=avx512") {
      const auto isa = arg == "--micro-isa=avx2" ? cpu::attention_internal::MicroIsa::kAvx2
                                                 : cpu::attention_internal::MicroIsa::kAvx512;
      if (!cpu::attention_internal::MicroIsaSupported(isa)) {
        std::fprintf(stderr, "this CPU cannot run the %s micro-kernels\n",
                     cpu::attention_internal::MicroIsaName(isa));
        return 2;
      }
      cpu::attention_internal::SetMicroKernelIsa(isa);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--filter=SUBSTRING] [--micro-isa=avx2|avx512]\n",
                   argv[0]);
      return 2;
    }
  }
  Reporter reporter(options);
  BenchSgemmPeak(options, reporter);
  BenchMatmul(options, reporter);
  BenchLmHead(options, reporter);
  BenchAttention(options, reporter);
  BenchChunkedAttention(options, reporter);
  BenchPackedAttention(options, reporter);
  return 0;
}

}  // namespace
}  // namespace sbp

int main(int argc, char** argv) {
  sbp::cpu::PrepareOpenBlas(argv);
  return sbp::Main(argc, argv);
}
