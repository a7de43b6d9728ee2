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
#include "kernels/compute_device.h"
#include "kernels/matmul_peak.h"
#include "worker/engine/batch.h"
#include "worker/engine/device_store.h"
#include "worker/engine/engine.h"
#include "worker/engine/parameter_store.h"
#include "worker/model/model_io.h"
#include "worker/train/checkpoint.h"
#include "worker/train/dataset.h"
#include "worker/train/job_plan.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/optimizer.h"
#include "worker/train/optimizer_state.h"
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
  if (expected != nullptr &&
      (config.vocab_size != expected->vocab_size || config.hidden_size != expected->hidden_size ||
       config.num_hidden_layers != expected->num_hidden_layers)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " model '", dir, "' does not have the policy model's shape"));
  }
  return store;
}

// The engine's chunk sizes: those the spec fixes, and for `auto` (0) in
// stream mode on a worker with a memory budget, the largest the memory
// planner fits in the budget (with the device's safety margin); without a
// budget the engine's defaults.
absl::StatusOr<EngineOptions> ChooseEngineOptions(const JobSpec& spec, const ModelConfig& config,
                                                  int64_t budget_bytes) {
  EngineOptions options{spec.streambp.mode, spec.streambp.chunk_tokens,
                        spec.streambp.logits_chunk_tokens};
  const bool automatic = options.chunk_tokens == 0 || options.logits_chunk_tokens == 0;
  if (options.mode != BackwardMode::kStream || !automatic || budget_bytes <= 0) return options;
  ASSIGN_OR_RETURN(MemoryPlan plan, PlanAutoChunks(PlanRequestForSpec(spec, config), budget_bytes,
                                                   DefaultSafetyMargin(spec.resources.device)));
  options.chunk_tokens = plan.chunk_tokens;
  options.logits_chunk_tokens = plan.logits_chunk_tokens;
  LOG(INFO) << spec.name << ": automatic chunk sizes " << plan.chunk_tokens << " / "
            << plan.logits_chunk_tokens << " tokens (predicted peak " << plan.peak_bytes
            << " bytes of " << budget_bytes << ")";
  return options;
}

// Rank `rank`'s examples of a step: positions rank, rank + N, ...
std::vector<int64_t> RankShare(const std::vector<int64_t>& global, int rank, int world_size) {
  std::vector<int64_t> mine;
  for (size_t i = static_cast<size_t>(rank); i < global.size(); i += world_size) {
    mine.push_back(global[i]);
  }
  return mine;
}

// True on every rank when any rank's flag is set (a stop must be unanimous).
absl::StatusOr<bool> AnyRank(Communicator* comm, bool flag) {
  double value = flag ? 1 : 0;
  if (comm != nullptr) RETURN_IF_ERROR(comm->AllReduce(&value, 1, ReduceOp::kMax));
  return value > 0;
}

// Sums a step's per-rank figures into the global ones on every rank.
absl::Status SumOverRanks(Communicator* comm, ObjectiveStepResult& result) {
  if (comm == nullptr) return absl::OkStatus();
  std::vector<double> values = {result.loss, static_cast<double>(result.tokens),
                                result.model_flops};
  std::vector<std::string> keys;
  for (auto& [key, value] : result.extra.items()) {
    if (!value.is_number()) continue;
    keys.push_back(key);
    values.push_back(value.get<double>());
  }
  // Every objective reports the same keys on every rank (with zeros where a
  // rank had no examples); check that before summing position by position.
  // Max of (n, -n) gives every rank both the largest and the smallest count,
  // so all of them agree on the verdict.
  double range[2] = {static_cast<double>(keys.size()), -static_cast<double>(keys.size())};
  RETURN_IF_ERROR(comm->AllReduce(range, 2, ReduceOp::kMax));
  if (range[0] != -range[1]) {
    return absl::FailedPreconditionError(absl::StrCat("ranks report different step figures (",
                                                      -range[1], " to ", range[0], " keys)"));
  }
  RETURN_IF_ERROR(
      comm->AllReduce(values.data(), static_cast<int64_t>(values.size()), ReduceOp::kSum));
  result.loss = values[0];
  result.tokens = static_cast<int64_t>(values[1]);
  result.model_flops = values[2];
  for (size_t i = 0; i < keys.size(); ++i) result.extra[keys[i]] = values[3 + i];
  return absl::OkStatus();
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
  ASSIGN_OR_RETURN(const Device device, ParseDeviceName(options.device));
  if (device.kind != spec.resources.device) {
    return absl::FailedPreconditionError(
        absl::StrCat("resources.device: the job trains on ", DeviceKindName(spec.resources.device),
                     " but this worker's device is ", DeviceName(device)));
  }
  const int world_size = static_cast<int>(spec.resources.world_size);
  if (world_size != 1 && !options.connect) {
    return absl::InvalidArgumentError(
        "resources.world_size: `sbp train` runs one worker; submit multi-worker jobs to a "
        "coordinator");
  }

  const DType compute_dtype = spec.train.precision == Precision::kBf16 ? DType::kBF16 : DType::kF32;
  ASSIGN_OR_RETURN(ComputeDevice compute, OpenComputeDevice(options.device, compute_dtype));
  Allocator& allocator = *compute.allocator;
  Backend& backend = *compute.backend;
  if (spec.resources.memory_bytes > 0) allocator.set_budget_bytes(spec.resources.memory_bytes);
  ASSIGN_OR_RETURN(const double reference_gflops, ReferenceMatmulGflops(backend));
  std::unique_ptr<Communicator> comm;
  if (options.connect) {
    ASSIGN_OR_RETURN(comm, options.connect(backend));
    if (comm->world_size() != world_size) {
      return absl::InvalidArgumentError(absl::StrCat("resources.world_size is ", world_size,
                                                     " but the communicator has ",
                                                     comm->world_size(), " ranks"));
    }
  }
  const int rank = comm ? comm->rank() : 0;

  // The weights: read in full precision into host memory outside the run's
  // allocator, then the compute copy on the device; the host copy is where
  // separate masters start from, and is dropped once they exist.
  const bool separate_master = compute_dtype != DType::kF32 || options.separate_master;
  CpuAllocator staging;
  ASSIGN_OR_RETURN(ParameterStore initial,
                   ParameterStore::Load(ResolveJobPath(options.base_dir, spec.model), staging,
                                        "weights", world_size));
  ASSIGN_OR_RETURN(ParameterStore weights,
                   CopyStoreToDevice(initial, backend, compute_dtype, "weights"));
  const ModelConfig config = weights.config();
  ASSIGN_OR_RETURN(Dataset dataset, Dataset::LoadForJob(spec, options.base_dir, config.vocab_size));
  ASSIGN_OR_RETURN(const EngineOptions engine_options,
                   ChooseEngineOptions(spec, config, allocator.budget_bytes()));
  Engine engine(config, backend, engine_options);
  OptimizerStateOptions state_options;
  state_options.weights = &weights;
  state_options.initial = &initial;
  state_options.separate_master = separate_master;
  state_options.comm = comm.get();
  ASSIGN_OR_RETURN(std::unique_ptr<OptimizerState> optimizer,
                   CreateOptimizerState(state_options, backend, spec.train, engine));
  initial = ParameterStore();  // the host copy is no longer needed

  // The reference model of DPO / GRPO (a real second model, frozen), in the
  // compute dtype on the device.
  std::optional<ParameterStore> reference;
  std::string reference_dir;
  if (spec.objective == Objective::kDpo) reference_dir = spec.dpo.reference;
  if (spec.objective == Objective::kGrpo && spec.grpo.beta > 0) reference_dir = spec.grpo.reference;
  if (!reference_dir.empty()) {
    ASSIGN_OR_RETURN(const ParameterStore host,
                     LoadStore(ResolveJobPath(options.base_dir, reference_dir), &config, staging,
                               "reference weights"));
    ASSIGN_OR_RETURN(reference,
                     CopyStoreToDevice(host, backend, compute_dtype, "reference weights"));
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
      ASSIGN_OR_RETURN(state, optimizer->Load(*latest));
      ASSIGN_OR_RETURN(
          cursor, DataCursor::FromJson(state.data_cursor, dataset.size(),
                                       static_cast<uint64_t>(spec.train.seed), spec.train.shuffle));
      LOG(INFO) << "resumed " << spec.name << " from " << *latest << " (step " << state.step << ")";
    }
  }
  std::unique_ptr<std::ofstream> metrics;
  if (rank == 0) {
    ASSIGN_OR_RETURN(metrics, OpenMetrics(run_dir + "/metrics.jsonl", state.step));
  }

  Engine reference_engine(
      config, backend,
      {BackwardMode::kStream, engine_options.chunk_tokens, engine_options.logits_chunk_tokens});
  ModelTensors w = BindModelTensors(weights);
  std::optional<ModelTensors> ref_tensors;
  if (reference.has_value()) ref_tensors = BindModelTensors(*reference);
  ASSIGN_OR_RETURN(std::unique_ptr<StepObjective> objective,
                   MakeStepObjective(spec, dataset, engine, w, reference_engine,
                                     ref_tensors ? &*ref_tensors : nullptr, comm.get()));

  observer->OnStart(spec, state.step, allocator.budget_bytes());
  TrainSummary summary;
  summary.first_step = state.step + 1;
  summary.last_step = state.step;

  auto save = [&](int64_t step) -> absl::Status {
    state.step = step;
    state.data_cursor = cursor.ToJson();
    RETURN_IF_ERROR(optimizer->Save(run_dir, state, spec.checkpoint.keep_last));
    summary.last_checkpoint = CheckpointPath(run_dir, step);
    observer->OnCheckpoint(step, summary.last_checkpoint);
    return absl::OkStatus();
  };

  double comm_waited = 0;
  for (int64_t step = state.step + 1; step <= spec.train.steps; ++step) {
    ASSIGN_OR_RETURN(const bool stop, AnyRank(comm.get(), observer->StopRequested()));
    if (stop) {
      summary.stopped_early = true;
      break;
    }
    const auto start = Clock::now();
    const std::vector<int64_t> indices =
        RankShare(cursor.Next(spec.train.sequences_per_step), rank, world_size);
    optimizer->ZeroGradients();
    ASSIGN_OR_RETURN(ObjectiveStepResult result, objective->Run(indices, optimizer->grads()));
    RETURN_IF_ERROR(optimizer->FinishBackward());
    RETURN_IF_ERROR(SumOverRanks(comm.get(), result));
    ASSIGN_OR_RETURN(const double grad_norm, optimizer->GlobalGradNorm());
    if (!std::isfinite(grad_norm) || !std::isfinite(result.loss)) {
      return absl::InternalError(absl::StrCat("step ", step, ": non-finite loss (", result.loss,
                                              ") or gradient norm (", grad_norm,
                                              "); lower train.lr or set max_grad_norm"));
    }
    const double lr = LearningRate(spec.train, step);
    RETURN_IF_ERROR(optimizer->Update(lr, step, ClipScale(grad_norm, spec.train.max_grad_norm)));
    backend.Synchronize();  // the step's device work is part of its time
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
    report.mfu = result.model_flops / seconds / 1e9 / (reference_gflops * world_size);
    report.peak_bytes = allocator.peak_bytes();
    report.current_bytes = allocator.current_bytes();
    report.extra = result.extra;
    if (comm) {
      // Seconds of this step the training thread waited on collectives.
      const double waited = optimizer->comm_wait_seconds();
      report.extra["comm_wait_seconds"] = waited - comm_waited;
      comm_waited = waited;
    }
    if (metrics) {
      *metrics << report.ToJson().dump() << '\n';
      metrics->flush();
    }
    observer->OnStep(report);
    state.last_loss = result.loss;
    summary.last_step = step;
    summary.final_loss = result.loss;

    const bool periodic =
        spec.checkpoint.every_steps > 0 && step % spec.checkpoint.every_steps == 0;
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
