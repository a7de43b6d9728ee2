#include "client/bench_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/cli_common.h"
#include "client/device_setup.h"
#include "common/byte_size.h"
#include "common/status_macros.h"
#include "kernels/cpu/blas_info.h"
#include "kernels/cpu/embedding_rows.h"
#include "kernels/cpu/sgemm_peak.h"
#include "kernels/matmul_peak.h"
#include "kernels/profiling_backend.h"
#include "kernels/random.h"
#include "nlohmann/json.hpp"
#include "worker/engine/batch.h"
#include "worker/engine/device_store.h"
#include "worker/engine/engine.h"
#include "worker/engine/lora_store.h"
#include "worker/engine/offload/checkpoint_store.h"
#include "worker/engine/parameter_store.h"
#include "worker/engine/planner.h"
#include "worker/train/packing.h"

namespace sbp::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string model;
  std::string preset;
  std::vector<int64_t> seq_lens;
  std::vector<std::string> modes;
  int64_t chunk_tokens = 0;
  int64_t logits_chunk_tokens = 0;
  int steps = 1;
  int warmup_steps = 1;  // untimed steps before the timed ones
  uint64_t seed = 1;
  std::string device = "cpu";
  std::string precision = "auto";
  // > 1: the sequence's tokens as that many examples of equal length, packed
  // into the one sequence (packed_docs) or run as separate sequences.
  int64_t packed_docs = 0;
  int64_t separate_docs = 0;
  int64_t lora_r = 0;  // > 0: LoRA on every module (frozen base, adapter gradients)
  // "rows": the embedding's gradient as the rows of the step's tokens where
  // training keeps it so (EmbeddingRowCapacity: CPU, untied, full model),
  // else dense; "dense": always the [V, H] table.
  std::string embedding_gradient = "rows";
  // One more step per configuration after the timed ones, through a
  // ProfilingBackend: each op's calls, time and share of that step. Only the
  // listed modes and lengths when any are given.
  bool profile_ops = false;
  std::vector<std::string> profile_modes;
  std::vector<int64_t> profile_seq_lens;
  // Where the layer checkpoints live (each tier a line of its own), the disk
  // tier's directory, and the device allocator's budget ("" : none).
  std::vector<std::string> checkpoints;
  std::string disk_dir = ".";
  std::string memory;
};

bool Profiled(const BenchOptions& o, const std::string& mode, int64_t seq_len) {
  return o.profile_ops &&
         (o.profile_modes.empty() || absl::c_linear_search(o.profile_modes, mode)) &&
         (o.profile_seq_lens.empty() || absl::c_linear_search(o.profile_seq_lens, seq_len));
}

// One more step, outside the timed figures, through a ProfilingBackend around `backend`
// (every op synchronised before and after, so that the device's time lands
// on the op that issued it). Prints one line per op, most time first:
//   {"profile_op", "calls", "seconds", "share_of_step", "mode", "model", "seq_len",
//    "profiled_step_seconds"}
// and a last one, "profile_op": "(unattributed)", for the step's time outside
// the ops (host work, the synchronisations themselves). The shares are of the
// profiled step, which is slower than a timed one: no op overlaps another.
absl::Status ProfileStep(const ModelConfig& config, Backend& backend, const EngineOptions& options,
                         const ModelTensors& w, const std::vector<TokenSequence>& batch,
                         ModelTensors& g, const nlohmann::json& context) {
  ProfilingBackend profiler(backend);
  Engine engine(config, profiler, options);
  backend.Synchronize();
  const auto start = Clock::now();
  absl::StatusOr<BatchResult> r = SftForwardBackward(engine, w, batch, g);
  backend.Synchronize();
  const double step = std::chrono::duration<double>(Clock::now() - start).count();
  if (!r.ok()) return r.status();
  auto print = [&](const std::string& name, int64_t calls, double seconds) {
    nlohmann::json line = context;
    line.update({{"profile_op", name},
                 {"calls", calls},
                 {"seconds", seconds},
                 {"share_of_step", step > 0 ? seconds / step : 0.0},
                 {"profiled_step_seconds", step}});
    std::printf("%s\n", line.dump().c_str());
  };
  for (const ProfilingBackend::OpStats& op : profiler.Stats()) print(op.name, op.calls, op.seconds);
  print("(unattributed)", 0, std::max(0.0, step - profiler.total_seconds()));
  std::fflush(stdout);
  return absl::OkStatus();
}

// The matmul rate the MFU figures are measured against, in this run: plain
// OpenBLAS sgemm on the CPU, bf16 (or f32) cuBLAS GEMMs of 8192^3 on a GPU.
absl::StatusOr<double> PeakGflops(Backend& backend) {
  if (backend.device().is_cpu()) return cpu::MeasureSgemmGflops();
  return MeasureMatmulGflops(backend, backend.activation_dtype(), 8192, 5);
}

absl::Status RunBench(const BenchOptions& o) {
  ASSIGN_OR_RETURN(ComputeDevice device, OpenCommandDevice(o.device, o.precision));
  Backend& backend = *device.backend;
  Allocator& allocator = *device.allocator;
  const bool gpu = !backend.device().is_cpu();
  ASSIGN_OR_RETURN(DeviceModel model, LoadDeviceModel(device, o.model, o.preset, o.seed));
  ParameterStore& weights = model.weights;
  const ModelConfig config = weights.config();
  // LoRA: the full gradients give way to adapters (alpha = r) and their
  // gradients; B is drawn at random so that every product is a real one.
  std::optional<ParameterStore> adapters;
  if (o.lora_r > 0) {
    model.grads = ParameterStore();
    LoraOptions lora;
    lora.r = o.lora_r;
    lora.alpha = static_cast<double>(o.lora_r);
    lora.target_modules = LoraModuleNames();
    lora.init_seed = o.seed;
    CpuAllocator host;
    ASSIGN_OR_RETURN(ParameterStore initial, CreateLoraStore(config, lora, host, "adapters"));
    InitLoraWeights(initial);
    for (auto& [name, t] : initial.NamedTensors()) {
      Tensor view = t;
      if (absl::StrContains(name, "lora_B")) FillNormal(view, o.seed + 1, 0.0f, 0.01f);
    }
    ASSIGN_OR_RETURN(
        adapters, CopyStoreToDevice(initial, backend, backend.activation_dtype(), "LoRA adapters"));
    ASSIGN_OR_RETURN(model.grads,
                     ZeroStoreOnDevice(*adapters, backend, DType::kF32, "adapter gradients"));
  }
  ParameterStore& grads = model.grads;
  std::optional<cpu::EmbeddingRowGradient> embed_rows;
  if (o.embedding_gradient == "rows" && o.lora_r == 0) {
    PlanRequest request;  // a step of one sequence, the longest
    request.config = config;
    request.device = gpu ? DeviceKind::kCuda : DeviceKind::kCpu;
    request.seq_len = *absl::c_max_element(o.seq_lens);
    request.embedding_row_sequences = 1;
    const int64_t capacity = EmbeddingRowCapacity(request);
    if (capacity > 0) {
      grads.groups()[grads.embed_group()].Detach();
      embed_rows.emplace(allocator, config.vocab_size, config.hidden_size);
      RETURN_IF_ERROR(embed_rows->Reserve(capacity));
    }
  }
  const int64_t fixed_bytes = allocator.current_bytes();
  if (!o.memory.empty()) {
    ASSIGN_OR_RETURN(const int64_t budget, ParseByteSize(o.memory));
    allocator.set_budget_bytes(budget);
  }
  int64_t device_memory = 0;
  if (gpu) {
    ASSIGN_OR_RETURN(const DeviceMemoryInfo info, QueryDeviceMemory(backend.device()));
    device_memory = info.total_bytes;
  }

  RETURN_IF_ERROR(CheckModelRunsOn(config, backend));  // before measuring anything
  ASSIGN_OR_RETURN(const double peak_gflops, PeakGflops(backend));
  ModelTensors w = BindModelTensors(weights);
  if (adapters.has_value()) AttachAdapters(*adapters, w);
  ModelTensors g = BindModelTensors(grads);
  if (embed_rows.has_value()) g.embed_rows = &*embed_rows;
  for (const int64_t seq_len : o.seq_lens) {
    TokenSequence sequence;
    sequence.input_ids.resize(seq_len);
    Tensor ids = Tensor::Wrap(sequence.input_ids.data(), {seq_len}, DType::kI32);
    FillIntegers(ids, o.seed, 0, static_cast<int32_t>(config.vocab_size));
    sequence.labels = sequence.input_ids;
    std::vector<TokenSequence> batch = {sequence};
    if (o.packed_docs > 1) {
      batch = PackSequences(SplitIntoExamples(sequence, o.packed_docs), seq_len);
    } else if (o.separate_docs > 1) {
      batch = SplitIntoExamples(sequence, o.separate_docs);
    }
    // Documents attend within themselves: causal attention over each.
    double attention_saving = TrainingFlops(config, seq_len);
    for (const TokenSequence& s : batch) attention_saving -= PackedTrainingFlops(config, s);
    const double flops = LoraTrainingFlops(config, w, seq_len);
    // The causal attention term of TrainingFlops (6 L Hq d T^2, the rest is
    // linear in T): reported so that the MFU's count can be checked.
    const double attention_flops =
        (TrainingFlops(config, 2 * seq_len) - 2 * TrainingFlops(config, seq_len)) / 2 -
        attention_saving;
    for (const std::string& mode_name : o.modes) {
      for (const std::string& tier_name : o.checkpoints) {
        ASSIGN_OR_RETURN(BackwardMode mode, ParseBackwardMode(mode_name));
        ASSIGN_OR_RETURN(const CheckpointTier tier, ParseCheckpointTier(tier_name));
        std::unique_ptr<CheckpointStore> store;
        if (tier == CheckpointTier::kHost) store = NewHostCheckpointStore(backend);
        if (tier == CheckpointTier::kDisk) {
          ASSIGN_OR_RETURN(store, NewDiskCheckpointStore(backend, o.disk_dir));
        }
        Engine engine(config, backend, {mode, o.chunk_tokens, o.logits_chunk_tokens});
        engine.set_checkpoint_store(store.get());
        const Engine::ChunkPlan plan = engine.PlanChunks(seq_len, /*training=*/true);
        ZeroStore(grads, backend);
        if (embed_rows.has_value()) embed_rows->Clear();
        double best = 1e30;
        int64_t untracked_rss = 0;
        BatchResult result;
        nlohmann::json line = {
            {"mode", mode_name},
            {"model", o.model.empty() ? o.preset : o.model},
            {"device", DeviceName(backend.device())},
            {"dtype", DTypeName(backend.activation_dtype())},
            {"seq_len", seq_len},
            {"documents", std::max<int64_t>({1, o.packed_docs, o.separate_docs})},
            {"layout", o.separate_docs > 1 ? "separate" : "packed"},
            {"lora_r", o.lora_r},
            {"checkpoints", tier_name},
            {"embedding_gradient", embed_rows.has_value() ? "rows" : "dense"},
            {"chunk_tokens", plan.chunk},
            {"logits_chunk_tokens", plan.logits_chunk}};
        if (gpu) line["device_memory_bytes"] = device_memory;
        // One untimed step first (OpenBLAS's per-thread buffers and page
        // faults on the CPU; cuBLAS heuristics and the memory pool on a GPU);
        // the figures cover the timed steps. The process RSS not held by the
        // allocator when they start (code, libraries, BLAS thread buffers) is
        // reported apart, so that the rest can be checked against the peak.
        absl::Status status;
        for (int step = -o.warmup_steps; step < o.steps && status.ok(); ++step) {
          if (step == 0) {
            ResetPeakRss();
            allocator.ResetPeak();
            untracked_rss = CurrentRssBytes() - allocator.current_bytes();
          }
          const auto start = Clock::now();
          absl::StatusOr<BatchResult> r = SftForwardBackward(engine, w, batch, g);
          backend.Synchronize();
          if (!r.ok()) {
            status = r.status();
            break;
          }
          result = *r;
          if (step >= 0) {
            best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
          }
        }
        if (!status.ok()) {
          // Out of memory is a result (the mode does not fit), not a failure.
          if (status.code() != absl::StatusCode::kResourceExhausted) return status;
          line["out_of_memory"] = true;
          line["error"] = std::string(status.message());
          line["peak_bytes"] = allocator.peak_bytes();
          std::printf("%s\n", line.dump().c_str());
          std::fflush(stdout);
          continue;
        }
        const double gflops = (flops - attention_saving) / best / 1e9;
        line.update({{"loss", result.loss},
                     {"peak_bytes", allocator.peak_bytes()},
                     {"weights_and_grads_bytes", fixed_bytes},
                     {"activation_peak_bytes", allocator.peak_bytes() - fixed_bytes},
                     {"rss_peak_bytes", PeakRssBytes()},
                     {"step_seconds", best},
                     {"tokens_per_second", static_cast<double>(seq_len) / best},
                     {"gflops", gflops},
                     {"model_flops", flops - attention_saving},
                     {"attention_flops", attention_flops},
                     {"peak_gflops", peak_gflops},
                     {"mfu", gflops / peak_gflops}});
        if (store != nullptr) {
          // Per step, over the warm-up and timed steps alike.
          const double steps = o.steps + o.warmup_steps;
          line.update({{"host_tier_bytes", store->host_bytes()},
                       {"disk_tier_bytes", store->disk_bytes()},
                       {"copy_bytes_per_step", store->moved_bytes() / steps},
                       {"copy_wait_seconds_per_step", store->queue().wait_seconds() / steps}});
        }
        if (!gpu) {
          const cpu::BlasInfo blas = cpu::CurrentBlasInfo();
          line.update({{"sgemm_gflops", peak_gflops},
                       {"mfu_vs_sgemm", gflops / peak_gflops},
                       {"rss_untracked_bytes", untracked_rss},
                       {"rss_tracked_peak_bytes", PeakRssBytes() - untracked_rss},
                       {"blas_library", blas.library_path},
                       {"blas_variant", std::string(cpu::BlasThreadingName(blas.threading))},
                       {"blas_core", blas.core_name},
                       {"blas_threads", blas.num_threads}});
        }
        std::printf("%s\n", line.dump().c_str());
        std::fflush(stdout);
        // After the line (its peak and times are the timed steps'): one more
        // step, profiled op by op.
        if (Profiled(o, mode_name, seq_len)) {
          const nlohmann::json context = {
              {"mode", mode_name}, {"model", line["model"]}, {"seq_len", seq_len}};
          const absl::Status profiled = ProfileStep(
              config, backend, {mode, o.chunk_tokens, o.logits_chunk_tokens}, w, batch, g, context);
          if (!profiled.ok()) {
            if (profiled.code() != absl::StatusCode::kResourceExhausted) return profiled;
            nlohmann::json failed = context;
            failed.update({{"profile_op", nullptr}, {"error", std::string(profiled.message())}});
            std::printf("%s\n", failed.dump().c_str());
            std::fflush(stdout);
          }
        }
      }
    }
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
  bench->add_option("--seq-len", o->seq_lens, "tokens in the sequence (repeatable)")
      ->required()
      ->check(CLI::PositiveNumber);
  bench->add_option("--mode", o->modes, "modes to run (repeatable; default all three)")
      ->check(CLI::IsMember({"stream", "checkpoint", "full"}));
  bench->add_option("--chunk-tokens", o->chunk_tokens, "query chunk rows (0: auto)");
  bench->add_option("--logits-chunk-tokens", o->logits_chunk_tokens, "logits rows (0: auto)");
  bench->add_option("--steps", o->steps, "timed steps per mode (best is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench
      ->add_option("--warmup-steps", o->warmup_steps,
                   "untimed steps first (0: the timed step is the first, e.g. only to show that a "
                   "length fits)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  auto* packed = bench
                     ->add_option("--packed-docs", o->packed_docs,
                                  "the tokens as this many equal documents packed in the sequence")
                     ->check(CLI::PositiveNumber);
  bench
      ->add_option("--separate-docs", o->separate_docs,
                   "the tokens as this many equal documents in separate sequences")
      ->check(CLI::PositiveNumber)
      ->excludes(packed);
  bench->add_option("--seed", o->seed, "seed for weights and tokens")->capture_default_str();
  bench->add_option("--device", o->device, "cpu or cuda:N")->capture_default_str();
  bench
      ->add_option("--precision", o->precision,
                   "activation storage: auto (bf16 on CUDA, fp32 on the CPU), fp32 or bf16")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}))
      ->capture_default_str();
  bench
      ->add_option("--lora-r", o->lora_r,
                   "LoRA of this rank on every linear layer: frozen base weights, adapter "
                   "gradients only (FLOPs counted without the frozen weights' gradients)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  auto* profile = bench->add_flag(
      "--profile-ops", o->profile_ops,
      "after the timed steps, one more step with every op timed (synchronised before and after): "
      "one JSON line per op with its calls, seconds and share of that step");
  bench
      ->add_option("--profile-mode", o->profile_modes,
                   "profile only these modes (repeatable; default every mode run)")
      ->check(CLI::IsMember({"stream", "checkpoint", "full"}))
      ->needs(profile);
  bench
      ->add_option("--profile-seq-len", o->profile_seq_lens,
                   "profile only these lengths (repeatable; default every --seq-len)")
      ->check(CLI::PositiveNumber)
      ->needs(profile);
  bench
      ->add_option("--checkpoints", o->checkpoints,
                   "where the layer inputs wait for the backward: device, host or disk "
                   "(repeatable, a line each; default device)")
      ->check(CLI::IsMember({"device", "host", "disk"}));
  bench->add_option("--disk-dir", o->disk_dir, "the disk tier's directory")->capture_default_str();
  bench
      ->add_option("--embedding-gradient", o->embedding_gradient,
                   "rows: the embedding's gradient as the rows of the step's tokens, as training "
                   "keeps it on the CPU for an untied full model (else dense); dense: the whole "
                   "[vocab, hidden] table")
      ->check(CLI::IsMember({"rows", "dense"}))
      ->capture_default_str();
  bench->add_option("--memory", o->memory,
                    "the device allocator's budget (e.g. 2GiB): a mode that needs more reports "
                    "out_of_memory");
  bench->callback([o, exit_code, model, preset] {
    if (model->count() + preset->count() != 1) {
      throw CLI::ValidationError("one of --model or --preset is required");
    }
    if (o->modes.empty()) o->modes = {"full", "checkpoint", "stream"};
    if (o->checkpoints.empty()) o->checkpoints = {"device"};
    const int64_t docs = std::max(o->packed_docs, o->separate_docs);
    for (const int64_t seq_len : o->seq_lens) {
      if (seq_len < docs) {
        throw CLI::ValidationError(
            absl::StrCat("--seq-len ", seq_len, " cannot be cut into ", docs, " documents (",
                         o->packed_docs > 0 ? "--packed-docs" : "--separate-docs",
                         "): every --seq-len must be at least that"));
      }
    }
    const absl::Status s = RunBench(*o);
    *exit_code = s.ok() ? kExitOk : ReportError("bench", s);
  });
}

}  // namespace sbp::cli
