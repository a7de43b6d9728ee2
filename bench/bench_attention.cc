// sbp-bench-attention: time of our backend's causal GQA attention, forward
// and backward, at one sequence length, on the device a training step runs
// on (OpenComputeDevice: the CUDA backend in bf16, or the CPU's in f32). The
// shape defaults to one layer of qwen3-8b: 32 query heads on 8 KV heads of
// 128; one sequence of T tokens attends to itself (Tq = Tk = T, q_offset 0),
// causal, no packed documents. bench/gpu_attention_peer.py measures PyTorch's
// scaled_dot_product_attention the same way, for tests/gpu/run to compare.
//
// FLOP convention (the one of sbp-bench-kernels and of FlashAttention's
// benchmarks): only the (query, key) pairs on or below the diagonal count,
// T (T + 1) / 2 per query head; forward = 4 d per pair per query head (QK^T
// and PV, 2 d each); backward = 2.5x forward (five GEMM-shaped products
// against two: recomputing S, dV, dP, dQ and dK). The softmax, the
// recomputation's exponentials and the per-row sums are not counted.
//
// Prints one JSON line per op, as soon as it is measured:
//   {"op": "attention_forward" | "attention_backward", "impl": "sbp", "seq_len",
//    "heads", "kv_heads", "head_dim", "dtype", "device", "seconds", "tflops",
//    "flops", "repeats"}
// "seconds" is the best of --repeats timed calls after --warmup untimed ones,
// each between two synchronisations of the device. The backward's dK and dV
// accumulate (Backend contract): they are zeroed before each call, outside
// the time.
//
//   sbp-bench-attention --device cuda:0 --seq-len 32768
//   sbp-bench-attention --device cpu --seq-len 256        (a smoke run)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/compute_device.h"
#include "kernels/cpu/openblas_core.h"
#include "kernels/random.h"
#include "kernels/tensor.h"
#include "nlohmann/json.hpp"

namespace sbp {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string device = "cpu";
  std::string precision = "auto";
  std::vector<int64_t> seq_lens;
  int64_t heads = 32;
  int64_t kv_heads = 8;
  int64_t head_dim = 128;
  int warmup = 1;
  int repeats = 5;
};

// Causal forward FLOPs of one sequence (see the header comment).
double ForwardFlops(int64_t t, int64_t heads, int64_t head_dim) {
  const double pairs = 0.5 * static_cast<double>(t) * static_cast<double>(t + 1);
  return 4.0 * static_cast<double>(head_dim) * pairs * static_cast<double>(heads);
}
constexpr double kBackwardFactor = 2.5;

// N(0, 1) values, written on the host and copied to the device.
absl::Status FillRandom(Backend& backend, Tensor& t, uint64_t seed) {
  if (t.device().is_cpu()) {
    FillNormal(t, seed, 0.0f, 1.0f);
    return absl::OkStatus();
  }
  CpuAllocator host;
  ASSIGN_OR_RETURN(Tensor staging, Tensor::Empty(host, t.shape(), t.dtype(), "staging"));
  FillNormal(staging, seed, 0.0f, 1.0f);
  backend.Copy(staging, t);
  return absl::OkStatus();
}

// Best wall time of `op` over `repeats` calls after `warmup`, each between
// two synchronisations; `before` runs untimed ahead of every call.
absl::StatusOr<double> Time(Backend& backend, int warmup, int repeats,
                            const std::function<void()>& before, const std::function<void()>& op) {
  double best = 1e30;
  for (int i = -warmup; i < repeats; ++i) {
    if (before) before();
    backend.Synchronize();
    const auto start = Clock::now();
    op();
    backend.Synchronize();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    RETURN_IF_ERROR(backend.TakeDeferredError());
    if (i >= 0) best = std::min(best, seconds);
  }
  return best;
}

absl::Status BenchOne(Backend& backend, const Options& o, int64_t t) {
  const DType dtype = backend.activation_dtype();
  Allocator& allocator = backend.allocator();
  auto make = [&](Shape shape, DType type, const char* what) {
    return Tensor::Empty(allocator, std::move(shape), type, what);
  };
  const int64_t hq = o.heads, hkv = o.kv_heads, d = o.head_dim;
  ASSIGN_OR_RETURN(Tensor q, make({t, hq, d}, dtype, "attention bench q"));
  ASSIGN_OR_RETURN(Tensor k, make({t, hkv, d}, dtype, "attention bench k"));
  ASSIGN_OR_RETURN(Tensor v, make({t, hkv, d}, dtype, "attention bench v"));
  ASSIGN_OR_RETURN(Tensor dout, make({t, hq, d}, dtype, "attention bench dout"));
  ASSIGN_OR_RETURN(Tensor out, make({t, hq, d}, dtype, "attention bench out"));
  ASSIGN_OR_RETURN(Tensor lse, make({t, hq}, DType::kF32, "attention bench lse"));
  ASSIGN_OR_RETURN(Tensor dq, make({t, hq, d}, dtype, "attention bench dq"));
  ASSIGN_OR_RETURN(Tensor dk, make({t, hkv, d}, dtype, "attention bench dk"));
  ASSIGN_OR_RETURN(Tensor dv, make({t, hkv, d}, dtype, "attention bench dv"));
  RETURN_IF_ERROR(FillRandom(backend, q, 1));
  RETURN_IF_ERROR(FillRandom(backend, k, 2));
  RETURN_IF_ERROR(FillRandom(backend, v, 3));
  RETURN_IF_ERROR(FillRandom(backend, dout, 4));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  const double forward_flops = ForwardFlops(t, hq, d);
  auto print = [&](const char* op, double seconds, double flops) {
    const nlohmann::json line = {{"op", op},
                                 {"impl", "sbp"},
                                 {"seq_len", t},
                                 {"heads", hq},
                                 {"kv_heads", hkv},
                                 {"head_dim", d},
                                 {"causal", true},
                                 {"dtype", DTypeName(dtype)},
                                 {"device", DeviceName(backend.device())},
                                 {"seconds", seconds},
                                 {"flops", flops},
                                 {"tflops", flops / seconds / 1e12},
                                 {"repeats", o.repeats}};
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  };
  ASSIGN_OR_RETURN(const double forward, Time(backend, o.warmup, o.repeats, nullptr, [&] {
                     backend.AttentionForward(q, k, v, /*q_offset=*/0, scale, out, &lse);
                   }));
  print("attention_forward", forward, forward_flops);
  ASSIGN_OR_RETURN(
      const double backward,
      Time(
          backend, o.warmup, o.repeats,
          [&] {
            backend.Fill(dk, 0.0f);
            backend.Fill(dv, 0.0f);
          },
          [&] { backend.AttentionBackward(q, k, v, out, dout, lse, 0, scale, dq, dk, dv); }));
  print("attention_backward", backward, kBackwardFactor * forward_flops);
  return absl::OkStatus();
}

absl::Status Run(const Options& o) {
  ASSIGN_OR_RETURN(const Device device, ParseDeviceName(o.device));
  DType dtype = DefaultActivationDType(device);
  if (o.precision == "fp32") dtype = DType::kF32;
  if (o.precision == "bf16") dtype = DType::kBF16;
  ASSIGN_OR_RETURN(ComputeDevice compute, OpenComputeDevice(o.device, dtype));
  Backend& backend = *compute.backend;
  RETURN_IF_ERROR(backend.CheckAttentionShape(o.head_dim, o.heads));
  for (const int64_t t : o.seq_lens) RETURN_IF_ERROR(BenchOne(backend, o, t));
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app("Causal GQA attention forward and backward of our backend: time and TFLOP/s");
  app.add_option("--device", o.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--precision", o.precision, "auto (bf16 on CUDA, fp32 on the CPU), fp32 or bf16")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--seq-len", o.seq_lens, "tokens T (repeatable; default 32768)")
      ->check(CLI::PositiveNumber);
  app.add_option("--heads", o.heads, "query heads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--kv-heads", o.kv_heads, "key/value heads (divides --heads)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--head-dim", o.head_dim, "head dimension")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed calls first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--repeats", o.repeats, "timed calls (the best is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.seq_lens.empty()) o.seq_lens = {32768};
  if (o.heads % o.kv_heads != 0) {
    std::fprintf(stderr, "sbp-bench-attention: --kv-heads %lld does not divide --heads %lld\n",
                 static_cast<long long>(o.kv_heads), static_cast<long long>(o.heads));
    return 2;
  }
  const absl::Status s = Run(o);
  if (!s.ok()) {
    std::fprintf(stderr, "sbp-bench-attention: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace sbp

int main(int argc, char** argv) {
  sbp::cpu::PrepareOpenBlas(argv);
  return sbp::Main(argc, argv);
}
