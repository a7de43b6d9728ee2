#include "client/bench_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "client/cli_common.h"
#include "common/status_macros.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/sgemm_peak.h"
#include "kernels/random.h"
#include "nlohmann/json.hpp"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_io.h"

namespace sbp::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string model;
  std::string preset;
  int64_t seq_len = 0;
  std::vector<std::string> modes;
  int64_t chunk_tokens = 0;
  int64_t logits_chunk_tokens = 0;
  int steps = 1;
  uint64_t seed = 1;
};

absl::Status RunBench(const BenchOptions& o) {
  CpuAllocator allocator;
  CpuBackend backend(allocator);
  ParameterStore weights;
  if (!o.model.empty()) {
    ASSIGN_OR_RETURN(weights, ParameterStore::Load(o.model, allocator, "weights"));
  } else {
    ASSIGN_OR_RETURN(ModelConfig preset, PresetConfig(o.preset));
    CpuAllocator staging;
    ASSIGN_OR_RETURN(ModelWeights fresh, InitModelWeights(preset, o.seed, staging));
    ASSIGN_OR_RETURN(weights, ParameterStore::FromWeights(fresh, allocator, "weights"));
  }
  const ModelConfig config = weights.config();
  ASSIGN_OR_RETURN(ParameterStore grads, ParameterStore::Create(config, allocator, "gradients"));
  const int64_t fixed_bytes = allocator.current_bytes();

  TokenSequence sequence;
  sequence.input_ids.resize(o.seq_len);
  Tensor ids = Tensor::Wrap(sequence.input_ids.data(), {o.seq_len}, DType::kI32);
  FillIntegers(ids, o.seed, 0, static_cast<int32_t>(config.vocab_size));
  sequence.labels = sequence.input_ids;
  const std::vector<TokenSequence> batch = {sequence};

  const double sgemm_gflops = cpu::MeasureSgemmGflops();
  const double flops = TrainingFlops(config, o.seq_len);
  ModelTensors w = BindModelTensors(weights);
  ModelTensors g = BindModelTensors(grads);
  for (const std::string& mode_name : o.modes) {
    ASSIGN_OR_RETURN(BackwardMode mode, ParseBackwardMode(mode_name));
    Engine engine(config, backend, {mode, o.chunk_tokens, o.logits_chunk_tokens});
    const Engine::ChunkPlan plan = engine.PlanChunks(o.seq_len, /*training=*/true);
    grads.Zero();
    ResetPeakRss();
    allocator.ResetPeak();
    double best = 1e30;
    BatchResult result;
    for (int step = 0; step < o.steps; ++step) {
      const auto start = Clock::now();
      ASSIGN_OR_RETURN(result, SftForwardBackward(engine, w, batch, g));
      best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    }
    const double gflops = flops / best / 1e9;
    nlohmann::json line = {
        {"mode", mode_name},
        {"model", o.model.empty() ? o.preset : o.model},
        {"seq_len", o.seq_len},
        {"chunk_tokens", plan.chunk},
        {"logits_chunk_tokens", plan.logits_chunk},
        {"loss", result.loss},
        {"peak_bytes", allocator.peak_bytes()},
        {"weights_and_grads_bytes", fixed_bytes},
        {"activation_peak_bytes", allocator.peak_bytes() - fixed_bytes},
        {"rss_peak_bytes", PeakRssBytes()},
        {"step_seconds", best},
        {"tokens_per_second", static_cast<double>(o.seq_len) / best},
        {"gflops", gflops},
        {"sgemm_gflops", sgemm_gflops},
        {"mfu_vs_sgemm", gflops / sgemm_gflops}};
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace

void AddBenchCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* bench = app.add_subcommand("bench", "time and memory of a training step per mode");
  auto* model = bench->add_option("--model", o->model, "Hugging Face model directory");
  auto* preset = bench->add_option("--preset", o->preset, "preset name (random weights)");
  model->excludes(preset);
  bench->add_option("--seq-len", o->seq_len, "tokens in the sequence")
      ->required()
      ->check(CLI::PositiveNumber);
  bench->add_option("--mode", o->modes, "modes to run (repeatable; default all three)")
      ->check(CLI::IsMember({"stream", "checkpoint", "full"}));
  bench->add_option("--chunk-tokens", o->chunk_tokens, "query chunk rows (0: auto)");
  bench->add_option("--logits-chunk-tokens", o->logits_chunk_tokens, "logits rows (0: auto)");
  bench->add_option("--steps", o->steps, "timed steps per mode (best is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench->add_option("--seed", o->seed, "seed for weights and tokens")->capture_default_str();
  bench->callback([o, exit_code, model, preset] {
    if (model->count() + preset->count() != 1) {
      throw CLI::ValidationError("one of --model or --preset is required");
    }
    if (o->modes.empty()) o->modes = {"full", "checkpoint", "stream"};
    const absl::Status s = RunBench(*o);
    *exit_code = s.ok() ? kExitOk : ReportError("bench", s);
  });
}

}  // namespace sbp::cli
