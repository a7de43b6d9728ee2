// The embedding's gradient as a row set (kernels/cpu/embedding_rows.h)
// against the dense V x H gradient, on the CPU, in one process: the
// allocator's peak and the step time of
//   forward_backward  one sequence of T tokens, forward + backward (what
//                     `sbp bench` times), gradients into a gradient store;
//   train_step        the same plus the local optimizer state's step (the
//                     global norm and AdamW, which read the rows as the
//                     dense gradient), as the trainer runs it.
// One JSON line per (measure, embedding gradient):
//   {"measure", "embedding_gradient": "dense" | "rows", "preset", "seq_len",
//    "peak_bytes", "fixed_bytes", "activation_peak_bytes", "rss_peak_bytes",
//    "step_seconds", "rows"}
// fixed_bytes: what the allocator held before the timed step (weights,
// gradients, optimizer state); peak_bytes is over the timed step, after one
// untimed warm-up step; rss_peak_bytes is the process's VmHWM over it.
//
// Usage: sbp-bench-embedding-rows [--preset=bench-qwen3] [--seq-len=4096]...
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "client/cli_common.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/embedding_rows.h"
#include "kernels/cpu/openblas_core.h"
#include "kernels/random.h"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/train/job_spec.h"
#include "worker/train/optimizer.h"
#include "worker/train/optimizer_state.h"

namespace sbp {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<TokenSequence> Sequence(const ModelConfig& config, int64_t T) {
  TokenSequence s;
  s.input_ids.resize(T);
  Tensor ids = Tensor::Wrap(s.input_ids.data(), {T}, DType::kI32);
  FillIntegers(ids, 7, 0, static_cast<int32_t>(config.vocab_size));
  s.labels = s.input_ids;
  return {s};
}

void Print(const std::string& measure, bool rows, const std::string& preset, int64_t T,
           int64_t peak, int64_t fixed, int64_t rss, double seconds, int64_t row_count) {
  std::printf(
      "{\"measure\": \"%s\", \"embedding_gradient\": \"%s\", \"preset\": \"%s\", \"seq_len\": "
      "%lld, \"peak_bytes\": %lld, \"fixed_bytes\": %lld, \"activation_peak_bytes\": %lld, "
      "\"rss_peak_bytes\": %lld, \"step_seconds\": %.3f, \"rows\": %lld}\n",
      measure.c_str(), rows ? "rows" : "dense", preset.c_str(), static_cast<long long>(T),
      static_cast<long long>(peak), static_cast<long long>(fixed),
      static_cast<long long>(peak - fixed), static_cast<long long>(rss), seconds,
      static_cast<long long>(row_count));
  std::fflush(stdout);
}

// Forward + backward into a gradient store whose embedding group is dense,
// or has no memory and a row set instead.
void ForwardBackward(const ModelConfig& config, CpuAllocator& allocator, CpuBackend& backend,
                     const ParameterStore& weights, const std::string& preset, int64_t T,
                     bool rows) {
  auto grads = ParameterStore::Create(config, allocator, "gradients");
  CHECK_OK(grads.status());
  std::optional<cpu::EmbeddingRowGradient> row_set;
  ModelTensors g = BindModelTensors(*grads);
  if (rows) {
    grads->groups()[grads->embed_group()].Detach();
    row_set.emplace(allocator, config.vocab_size, config.hidden_size);
    g.embed = Tensor();
    g.embed_rows = &*row_set;
  }
  Engine engine(config, backend, {BackwardMode::kStream, 0, 0});
  const ModelTensors w = BindModelTensors(weights);
  const std::vector<TokenSequence> batch = Sequence(config, T);
  CHECK_OK(SftForwardBackward(engine, w, batch, g).status());  // warm-up
  if (rows) row_set->Clear();
  const int64_t fixed = allocator.current_bytes();
  allocator.ResetPeak();
  cli::ResetPeakRss();
  const auto start = Clock::now();
  CHECK_OK(SftForwardBackward(engine, w, batch, g).status());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  Print("forward_backward", rows, preset, T, allocator.peak_bytes(), fixed, cli::PeakRssBytes(),
        seconds, rows ? row_set->rows() : config.vocab_size);
}

// ZeroGradients, forward + backward, FinishBackward, norm, AdamW.
void TrainStep(const ModelConfig& config, CpuAllocator& allocator, CpuBackend& backend,
               ParameterStore& weights, const std::string& preset, int64_t T, bool rows) {
  Engine engine(config, backend, {BackwardMode::kStream, 0, 0});
  OptimizerStateOptions options;
  options.weights = &weights;
  options.initial = &weights;
  options.embedding_row_capacity = rows ? T : 0;
  TrainSpec train;
  train.max_grad_norm = 1.0;
  auto state = CreateOptimizerState(options, backend, train, engine);
  CHECK_OK(state.status());
  const ModelTensors w = BindModelTensors(weights);
  const std::vector<TokenSequence> batch = Sequence(config, T);
  auto step = [&](int64_t n) {
    (*state)->ZeroGradients();
    CHECK_OK(SftForwardBackward(engine, w, batch, (*state)->grads()).status());
    CHECK_OK((*state)->FinishBackward());
    auto norm = (*state)->GlobalGradNorm();
    CHECK_OK(norm.status());
    CHECK_OK((*state)->Update(1e-5, n, ClipScale(*norm, train.max_grad_norm)));
  };
  step(1);  // warm-up
  const int64_t fixed = allocator.current_bytes();
  allocator.ResetPeak();
  cli::ResetPeakRss();
  const auto start = Clock::now();
  step(2);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  Print("train_step", rows, preset, T, allocator.peak_bytes(), fixed, cli::PeakRssBytes(), seconds,
        -1);
}

int Main(int argc, char** argv) {
  std::string preset = "bench-qwen3";
  std::vector<int64_t> seq_lens;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--preset=", 0) == 0) {
      preset = arg.substr(9);
    } else if (arg.rfind("--seq-len=", 0) == 0) {
      seq_lens.push_back(std::stoll(arg.substr(10)));
    } else {
      std::fprintf(stderr, "usage: %s [--preset=NAME] [--seq-len=T]...\n", argv[0]);
      return 2;
    }
  }
  if (seq_lens.empty()) seq_lens = {4096};
  auto config = PresetConfig(preset);
  CHECK_OK(config.status());
  CHECK(!config->tie_word_embeddings) << preset << " ties its embeddings: the gradient is dense";
  CpuAllocator allocator;
  CpuBackend backend(allocator);
  auto weights = ParameterStore::Create(*config, allocator, "weights");
  CHECK_OK(weights.status());
  for (size_t g = 0; g < weights->groups().size(); ++g) {
    FillNormal(weights->groups()[g].flat, 100 + g, 0.0f, 0.02f);
  }
  for (const int64_t T : seq_lens) {
    for (bool rows : {false, true}) {
      ForwardBackward(*config, allocator, backend, *weights, preset, T, rows);
    }
    for (bool rows : {false, true})
      TrainStep(*config, allocator, backend, *weights, preset, T, rows);
  }
  return 0;
}

}  // namespace
}  // namespace sbp

int main(int argc, char** argv) {
  sbp::cpu::PrepareOpenBlas(argv);
  return sbp::Main(argc, argv);
}
