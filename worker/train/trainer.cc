#include "worker/train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/sgemm_peak.h"
#include "worker/engine/batch.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_io.h"
#include "worker/train/checkpoint.h"
#include "worker/train/dataset.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/optimizer.h"
#include "worker/train/step_objective.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Keeps the lines of metrics.jsonl up to `last_step` (a resumed run rewrites
// the steps after its checkpoint) and opens it for appending.
absl::StatusOr<std::unique_ptr<std::ofstream>> OpenMetrics(const std::string& path,
                                                           int64_t last_step) {
  std::vector<std::string> kept;
  {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.value("step", int64_t{0}) <= last_step) {
        kept.push_back(line);
      }
    }
  }
  auto out = std::make_unique<std::ofstream>(path, std::ios::trunc);
  if (!*out) return absl::InternalError(absl::StrCat("cannot write ", path));
  for (const std::string& line : kept) *out << line << '\n';
  out->flush();
  return out;
}

absl::StatusOr<ParameterStore> LoadStore(const std::string& dir, const ModelConfig* expected,
                                         Allocator& allocator, const std::string& what) {
  ASSIGN_OR_RETURN(ParameterStore store, ParameterStore::Load(dir, allocator, what));
  const ModelConfig& config = store.config();
  if (expected != nullptr && (config.vocab_size != expected->vocab_size ||
                              config.hidden_size != expected->hidden_size ||
                              config.num_hidden_layers != expected->num_hidden_layers)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " model '", dir, "' does not have the policy model's shape"));
  }
  return store;
}

}  // namespace

nlohmann::json StepReport::ToJson() const {
  nlohmann::json j = {{"step", step},
                      {"loss", loss},
                      {"lr", lr},
                      {"grad_norm", grad_norm},
                      {"tokens", tokens},
                      {"tokens_total", tokens_total},
                      {"tokens_per_second", tokens_per_second},
                      {"step_seconds", step_seconds},
                      {"mfu", mfu},
                      {"peak_bytes", peak_bytes},
                      {"current_bytes", current_bytes}};
  if (extra.is_object()) {
    for (auto& [key, value] : extra.items()) j[key] = value;
  }
  return j;
}

absl::StatusOr<TrainSummary> RunTraining(const JobSpec& spec, const TrainOptions& options,
                                         TrainingObserver* observer) {
  TrainingObserver no_observer;
  if (observer == nullptr) observer = &no_observer;
  RETURN_IF_ERROR(ValidateJobSpecFiles(spec, options.base_dir));
  if (spec.resources.device != DeviceKind::kCpu) {
    return absl::FailedPreconditionError(
        "resources.device: this worker has no CUDA backend; use device: cpu");
  }
  if (spec.train.precision != Precision::kFp32) {
    return absl::InvalidArgumentError(
        "train.precision: the CPU backend computes in fp32; bf16 needs device: cuda");
  }
  if (spec.resources.world_size != 1) {
    return absl::InvalidArgumentError(
        "resources.world_size: `sbp train` runs one worker; submit multi-worker jobs to a "
        "coordinator");
  }

  CpuAllocator allocator;
  if (spec.resources.memory_bytes > 0) allocator.set_budget_bytes(spec.resources.memory_bytes);
  CpuBackend backend(allocator);

  const std::string model_dir = ResolveJobPath(options.base_dir, spec.model);
  ASSIGN_OR_RETURN(ParameterStore weights, LoadStore(model_dir, nullptr, allocator, "weights"));
  const ModelConfig config = weights.config();
  ASSIGN_OR_RETURN(Dataset dataset,
                   Dataset::LoadForJob(spec, options.base_dir, config.vocab_size));
  ASSIGN_OR_RETURN(ParameterStore grads, ParameterStore::Create(config, allocator, "gradients"));
  ASSIGN_OR_RETURN(AdamWOptimizer optimizer, AdamWOptimizer::Create(config, backend, spec.train));

  // The reference model of DPO / GRPO (a real second model, frozen).
  std::optional<ParameterStore> reference;
  std::string reference_dir;
  if (spec.objective == Objective::kDpo) reference_dir = spec.dpo.reference;
  if (spec.objective == Objective::kGrpo && spec.grpo.beta > 0) reference_dir = spec.grpo.reference;
  if (!reference_dir.empty()) {
    ASSIGN_OR_RETURN(reference, LoadStore(ResolveJobPath(options.base_dir, reference_dir),
                                          &config, allocator, "reference weights"));
  }

  const std::string run_dir = ResolveJobPath(options.base_dir, spec.checkpoint.dir);
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", run_dir, ": ", ec.message()));

  DataCursor cursor(dataset.size(), static_cast<uint64_t>(spec.train.seed), spec.train.shuffle);
  TrainerState state;
  state.job_name = spec.name;
  if (options.resume) {
    ASSIGN_OR_RETURN(std::optional<std::string> latest, FindLatestCheckpoint(run_dir));
    if (latest.has_value()) {
      ASSIGN_OR_RETURN(state, LoadCheckpoint(*latest, weights, optimizer.exp_avg(),
                                             optimizer.exp_avg_sq()));
      ASSIGN_OR_RETURN(cursor, DataCursor::FromJson(state.data_cursor, dataset.size(),
                                                    static_cast<uint64_t>(spec.train.seed),
                                                    spec.train.shuffle));
      LOG(INFO) << "resumed " << spec.name << " from " << *latest << " (step " << state.step
                << ")";
    }
  }
  ASSIGN_OR_RETURN(auto metrics, OpenMetrics(run_dir + "/metrics.jsonl", state.step));

  Engine engine(config, backend,
                {spec.streambp.mode, spec.streambp.chunk_tokens, spec.streambp.logits_chunk_tokens});
  Engine reference_engine(config, backend, {BackwardMode::kStream, spec.streambp.chunk_tokens,
                                            spec.streambp.logits_chunk_tokens});
  ModelTensors w = BindModelTensors(weights);
  ModelTensors g = BindModelTensors(grads);
  std::optional<ModelTensors> ref_tensors;
  if (reference.has_value()) ref_tensors = BindModelTensors(*reference);
  ASSIGN_OR_RETURN(std::unique_ptr<StepObjective> objective,
                   MakeStepObjective(spec, dataset, engine, w, reference_engine,
                                     ref_tensors ? &*ref_tensors : nullptr));

  const double reference_gflops = cpu::MeasureSgemmGflops(1024, 2);
  observer->OnStart(spec, state.step, allocator.budget_bytes());
  TrainSummary summary;
  summary.first_step = state.step + 1;
  summary.last_step = state.step;

  auto save = [&](int64_t step) -> absl::Status {
    state.step = step;
    state.data_cursor = cursor.ToJson();
    RETURN_IF_ERROR(SaveCheckpoint(run_dir, weights, optimizer.exp_avg(), optimizer.exp_avg_sq(),
                                   state, spec.checkpoint.keep_last));
    summary.last_checkpoint = CheckpointPath(run_dir, step);
    observer->OnCheckpoint(step, summary.last_checkpoint);
    return absl::OkStatus();
  };

  for (int64_t step = state.step + 1; step <= spec.train.steps; ++step) {
    if (observer->StopRequested()) {
      summary.stopped_early = true;
      break;
    }
    const auto start = Clock::now();
    const std::vector<int64_t> indices = cursor.Next(spec.train.sequences_per_step);
    grads.Zero();
    ASSIGN_OR_RETURN(ObjectiveStepResult result, objective->Run(indices, g));
    const double grad_norm = AdamWOptimizer::GlobalGradNorm(backend, grads);
    if (!std::isfinite(grad_norm) || !std::isfinite(result.loss)) {
      return absl::InternalError(absl::StrCat("step ", step, ": non-finite loss (", result.loss,
                                              ") or gradient norm (", grad_norm,
                                              "); lower train.lr or set max_grad_norm"));
    }
    const double lr = LearningRate(spec.train, step);
    optimizer.Step(weights, grads, lr, step,
                   ClipScale(grad_norm, spec.train.max_grad_norm));
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

    StepReport report;
    report.step = step;
    report.total_steps = spec.train.steps;
    report.loss = result.loss;
    report.lr = lr;
    report.grad_norm = grad_norm;
    report.tokens = result.tokens;
    state.tokens_seen += result.tokens;
    report.tokens_total = state.tokens_seen;
    report.step_seconds = seconds;
    report.tokens_per_second = static_cast<double>(result.tokens) / seconds;
    report.mfu = result.model_flops / seconds / 1e9 / reference_gflops;
    report.peak_bytes = allocator.peak_bytes();
    report.current_bytes = allocator.current_bytes();
    report.extra = result.extra;
    *metrics << report.ToJson().dump() << '\n';
    metrics->flush();
    observer->OnStep(report);
    state.last_loss = result.loss;
    summary.last_step = step;
    summary.final_loss = result.loss;

    const bool periodic = spec.checkpoint.every_steps > 0 && step % spec.checkpoint.every_steps == 0;
    const bool last = step == spec.train.steps;
    const bool stop_here = options.stop_after_step > 0 && step >= options.stop_after_step;
    if (periodic || last || stop_here) RETURN_IF_ERROR(save(step));
    if (stop_here) {
      summary.stopped_early = !last;
      break;
    }
  }
  if (summary.stopped_early && summary.last_checkpoint.empty() &&
      summary.last_step >= summary.first_step) {
    RETURN_IF_ERROR(save(summary.last_step));
  }
  summary.peak_bytes = allocator.peak_bytes();
  return summary;
}

}  // namespace sbp
