#include "worker/train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/byte_size.h"
#include "common/failure_kind.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/compute_device.h"
#include "kernels/matmul_peak.h"
#include "worker/dist/communicator_sequence_group.h"
#include "worker/dist/data_parallel_view.h"
#include "worker/engine/batch.h"
#include "worker/engine/device_store.h"
#include "worker/engine/engine.h"
#include "worker/engine/lora_store.h"
#include "worker/engine/parameter_store.h"
#include "worker/engine/planner.h"
#include "worker/model/model_io.h"
#include "worker/train/checkpoint.h"
#include "worker/train/dataset.h"
#include "worker/train/evaluation.h"
#include "worker/train/job_plan.h"
#include "worker/train/lora_adapters.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/metrics_log.h"
#include "worker/train/optimizer.h"
#include "worker/train/optimizer_state.h"
#include "worker/train/rollout/rollout.h"
#include "worker/train/run_directory.h"
#include "worker/train/step_objective.h"
#include "worker/train/tier_meter.h"
#include "worker/train/tracking/tensorboard_log.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The first field in which `reference` differs from the policy's shape (the
// reference runs through an engine made for the policy's config), or "".
std::string ShapeDifference(const ModelConfig& reference, const ModelConfig& policy) {
  auto text = [](auto v) {
    if constexpr (std::is_same_v<decltype(v), bool>) {
      return std::string(v ? "true" : "false");
    } else {
      return absl::StrCat(v);
    }
  };
  auto differs = [&](const char* field, auto a, auto b) {
    return a == b ? std::string()
                  : absl::StrCat(field, " ", text(a), " (the policy has ", text(b), ")");
  };
  for (const std::string& d : {
           differs("model_type", ArchitectureModelType(reference.architecture),
                   ArchitectureModelType(policy.architecture)),
           differs("vocab_size", reference.vocab_size, policy.vocab_size),
           differs("hidden_size", reference.hidden_size, policy.hidden_size),
           differs("intermediate_size", reference.intermediate_size, policy.intermediate_size),
           differs("num_hidden_layers", reference.num_hidden_layers, policy.num_hidden_layers),
           differs("num_attention_heads", reference.num_attention_heads,
                   policy.num_attention_heads),
           differs("num_key_value_heads", reference.num_key_value_heads,
                   policy.num_key_value_heads),
           differs("head_dim", reference.head_dim, policy.head_dim),
           differs("attention_bias", reference.attention_bias, policy.attention_bias),
           differs("qk_norm", reference.qk_norm, policy.qk_norm),
           differs("tie_word_embeddings", reference.tie_word_embeddings,
                   policy.tie_word_embeddings),
       }) {
    if (!d.empty()) return d;
  }
  return "";
}

absl::StatusOr<ParameterStore> LoadStore(const std::string& dir, const ModelConfig* expected,
                                         Allocator& allocator, const std::string& what) {
  ASSIGN_OR_RETURN(ParameterStore store, ParameterStore::Load(dir, allocator, what));
  if (expected != nullptr) {
    if (const std::string d = ShapeDifference(store.config(), *expected); !d.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " model '", dir, "' has ", d,
                       ": the reference must have the policy model's architecture and shape"));
    }
  }
  return store;
}

// The planner's request for this run: the spec's, with the checkpoint tier
// the worker chose.
PlanRequest RunPlanRequest(const JobSpec& spec, const ModelConfig& config, CheckpointTier tier) {
  PlanRequest request = PlanRequestForSpec(spec, config);
  request.checkpoint_tier = tier;
  return request;
}

// The engine's chunk sizes: those the spec fixes, and for `auto` (0) in
// stream mode on a worker with a memory budget, the largest the memory
// planner fits in the budget (with the device's safety margin); without a
// budget the engine's defaults.
absl::StatusOr<EngineOptions> ChooseEngineOptions(const JobSpec& spec, const ModelConfig& config,
                                                  int64_t budget_bytes, CheckpointTier tier) {
  EngineOptions options{spec.streambp.mode, spec.streambp.chunk_tokens,
                        spec.streambp.logits_chunk_tokens};
  const bool automatic = options.chunk_tokens == 0 || options.logits_chunk_tokens == 0;
  if (options.mode != BackwardMode::kStream || !automatic || budget_bytes <= 0) return options;
  ASSIGN_OR_RETURN(MemoryPlan plan, PlanAutoChunks(RunPlanRequest(spec, config, tier), budget_bytes,
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

// Every rank gets rank 0's verdict on `what` (the others pass OK).
absl::Status AgreeOnRankZero(Communicator* comm, const absl::Status& status,
                             absl::string_view what) {
  if (comm == nullptr) return status;
  double failed = status.ok() ? 0 : 1;
  RETURN_IF_ERROR(comm->AllReduce(&failed, 1, ReduceOp::kMax));
  if (!status.ok()) return status;
  if (failed > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank 0 could not ", what, " (its error names the reason)"));
  }
  return absl::OkStatus();
}

// DIVERGED: the step, the figures and the last good checkpoint.
absl::Status Diverged(int64_t step, double loss, double grad_norm, const std::string& run_dir) {
  const absl::StatusOr<std::optional<std::string>> last = FindLatestCheckpoint(run_dir);
  const std::string good = last.ok() && last->has_value()
                               ? absl::StrCat("the last good checkpoint is ", **last)
                               : std::string("there is no checkpoint yet");
  return WithFailureKind(absl::InternalError(absl::StrCat(
                             "diverged at step ", step, ": the loss (", loss,
                             ") or the gradient norm (", grad_norm, ") is not finite; ", good,
                             "; lower train.lr, set train.max_grad_norm, or check the data")),
                         FailureKind::kDiverged);
}

// A storage failure's message completed with the free space where the run
// lives, so that the user sees at once whether the disk is full.
absl::Status WithStorageDetails(absl::Status status, const std::string& run_dir) {
  if (status.ok() || GetFailureKind(status) != FailureKind::kStorage) return status;
  std::error_code ec;
  const std::filesystem::space_info space = std::filesystem::space(run_dir, ec);
  const std::string free_text =
      ec ? std::string("free space unknown")
         : absl::StrCat(FormatByteSize(static_cast<int64_t>(space.available)), " free of ",
                        FormatByteSize(static_cast<int64_t>(space.capacity)));
  return WithFailureKind(
      absl::Status(status.code(), absl::StrCat(status.message(), " (", run_dir, ": ", free_text,
                                               "); the attempt is retried once there is room")),
      FailureKind::kStorage);
}

// OUT_OF_MEMORY names the plan: what the memory planner predicts for this
// job with the engine's chunk sizes, against the budget.
absl::Status WithMemoryPlan(absl::Status status, const JobSpec& spec, const ModelConfig& config,
                            const EngineOptions& engine, int64_t budget_bytes,
                            CheckpointTier tier) {
  if (status.code() != absl::StatusCode::kResourceExhausted) return status;
  PlanRequest request = RunPlanRequest(spec, config, tier);
  request.chunk_tokens = engine.chunk_tokens;
  request.logits_chunk_tokens = engine.logits_chunk_tokens;
  const absl::StatusOr<MemoryPlan> plan = PlanMemory(request);
  if (!plan.ok()) return status;
  return absl::ResourceExhaustedError(absl::StrCat(
      status.message(), " (plan: ", BackwardModeName(engine.mode), " mode, ",
      CheckpointTierName(tier), " checkpoints, chunks ", plan->chunk_tokens, "/",
      plan->logits_chunk_tokens, " tokens, predicted peak ", FormatByteSize(plan->peak_bytes),
      " of a ", FormatByteSize(budget_bytes), " budget; `sbp plan` suggests what fits)"));
}

// The rollout sampler of an online GRPO job: rewards run in the run
// directory, a reward program's stderr goes to the worker's log.
absl::StatusOr<std::unique_ptr<RolloutSampler>> CreateRolloutSampler(const JobSpec& spec,
                                                                     const TrainOptions& options,
                                                                     const ModelConfig& config,
                                                                     Backend& backend,
                                                                     const std::string& run_dir) {
  if (!spec.grpo.reward.command.empty() && !options.allow_reward_programs) {
    return absl::InvalidArgumentError(
        "grpo.reward.command: this worker does not run reward programs (start sbp-worker with "
        "--allow-reward-programs to let jobs run them); use a built-in grpo.reward.function");
  }
  RewardContext reward;
  reward.working_dir = run_dir;
  const std::string job = spec.name;
  reward.on_stderr_line = [job](const std::string& line) {
    LOG(INFO) << job << ": reward program: " << line;
  };
  const std::string tokenizer = spec.grpo.rollout.tokenizer.empty()
                                    ? std::string()
                                    : ResolveJobPath(options.base_dir, spec.grpo.rollout.tokenizer);
  return RolloutSampler::Create(spec, config, backend, tokenizer, reward);
}

// The step's rollout figures over every rank: counts and sums add, the
// longest completion and the slowest rank's seconds are maxima.
absl::StatusOr<RolloutReport> SummariseRollouts(Communicator* comm, const RolloutStats& local,
                                                double step_seconds) {
  std::vector<double> sums = {static_cast<double>(local.completions), local.reward_sum,
                              local.reward_squares, static_cast<double>(local.length_sum),
                              static_cast<double>(local.truncated)};
  std::vector<double> maxima = {static_cast<double>(local.length_max), local.seconds};
  if (comm != nullptr && comm->world_size() > 1) {
    RETURN_IF_ERROR(
        comm->AllReduce(sums.data(), static_cast<int64_t>(sums.size()), ReduceOp::kSum));
    RETURN_IF_ERROR(
        comm->AllReduce(maxima.data(), static_cast<int64_t>(maxima.size()), ReduceOp::kMax));
  }
  RolloutReport r;
  r.present = true;
  const double n = std::max(1.0, sums[0]);
  r.reward_mean = sums[1] / n;
  r.reward_std = std::sqrt(std::max(0.0, sums[2] / n - r.reward_mean * r.reward_mean));
  r.completion_length_mean = sums[3] / n;
  r.completion_length_max = static_cast<int64_t>(maxima[0]);
  r.truncated_fraction = sums[4] / n;
  r.rollout_tokens = static_cast<int64_t>(sums[3]);
  r.rollout_seconds = maxima[1];
  r.train_seconds = std::max(0.0, step_seconds - r.rollout_seconds);
  r.rollout_tokens_per_second = r.rollout_seconds > 0 ? sums[3] / r.rollout_seconds : 0;
  return r;
}

}  // namespace

nlohmann::json RolloutReport::ToJson() const {
  return {{"reward_mean", reward_mean},
          {"reward_std", reward_std},
          {"completion_length_mean", completion_length_mean},
          {"completion_length_max", completion_length_max},
          {"truncated_fraction", truncated_fraction},
          {"rollout_tokens", rollout_tokens},
          {"rollout_seconds", rollout_seconds},
          {"train_seconds", train_seconds},
          {"rollout_tokens_per_second", rollout_tokens_per_second}};
}

nlohmann::json StepReport::ToJson() const {
  nlohmann::json j = {{"step", step},
                      {"epoch", epoch},
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
  if (checkpoint_tier != "device" || optimizer_offload) {
    j["checkpoint_tier"] = checkpoint_tier;
    j["optimizer_offload"] = optimizer_offload;
    j["host_tier_bytes"] = host_tier_bytes;
    j["host_tier_peak_bytes"] = host_tier_peak_bytes;
    j["disk_tier_bytes"] = disk_tier_bytes;
    j["offload_copy_bytes"] = offload_copy_bytes;
    j["offload_copy_seconds"] = offload_copy_seconds;
    j["offload_wait_seconds"] = offload_wait_seconds;
  }
  if (extra.is_object()) {
    for (auto& [key, value] : extra.items()) j[key] = value;
  }
  if (eval_step == step && step > 0) j["eval_loss"] = eval_loss;
  if (rollout.present) {
    const nlohmann::json figures = rollout.ToJson();
    for (auto& [key, value] : figures.items()) j[key] = value;
  }
  if (!time.empty()) j["time"] = time;
  return j;
}

namespace {

absl::StatusOr<TrainSummary> Train(const JobSpec& spec, const TrainOptions& options,
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
  // Sequence parallelism: the group of ranks that shares this rank's
  // sequences, and the data-parallel view the step figures and the
  // examples' shares go through (data_parallel_view.h).
  const int sequence_parallel = static_cast<int>(spec.resources.sequence_parallel);
  std::unique_ptr<Communicator> group_comm;
  std::optional<CommunicatorSequenceGroup> sequence_group;
  std::optional<DataParallelView> data_view;
  Communicator* data_comm = comm.get();
  if (sequence_parallel > 1) {
    if (!options.connect_sequence_group || comm == nullptr) {
      return absl::InvalidArgumentError(
          "resources.sequence_parallel: sequence parallelism needs several workers; submit the "
          "job to a coordinator (`sbp run --workers N` runs one locally)");
    }
    ASSIGN_OR_RETURN(group_comm, options.connect_sequence_group(backend, sequence_parallel));
    if (group_comm->world_size() != sequence_parallel) {
      return absl::InvalidArgumentError(
          absl::StrCat("resources.sequence_parallel is ", sequence_parallel,
                       " but the sequence group has ", group_comm->world_size(), " ranks"));
    }
    sequence_group.emplace(*group_comm);
    data_view.emplace(*comm, sequence_parallel);
    data_comm = &*data_view;
  }
  const int rank = comm ? comm->rank() : 0;
  const int data_rank = data_comm ? data_comm->rank() : 0;
  const int data_world = data_comm ? data_comm->world_size() : 1;

  // The weights: read in full precision into host memory outside the run's
  // allocator, then the compute copy on the device; the host copy is where
  // separate masters start from, and is dropped once they exist.
  const bool separate_master = compute_dtype != DType::kF32 || options.separate_master;
  // Host copies on their way to the device, within the run's budget too, so
  // that a model too large for it fails before anything is copied twice.
  CpuAllocator staging;
  staging.set_budget_bytes(allocator.budget_bytes());
  ASSIGN_OR_RETURN(ParameterStore initial,
                   ParameterStore::Load(ResolveJobPath(options.base_dir, spec.model), staging,
                                        "weights", world_size));
  // ZeRO-3 keeps no whole compute copy: the layout here, each rank's shard
  // with the optimizer (sharded_weights.h).
  const bool shard_weights = spec.train.zero_stage == 3;
  ParameterStore weights;
  if (shard_weights) {
    weights = ParameterStore::CreateLayout(initial.config(), world_size);
  } else {
    ASSIGN_OR_RETURN(weights, CopyStoreToDevice(initial, backend, compute_dtype, "weights"));
  }
  const ModelConfig config = weights.config();
  RETURN_IF_ERROR(CheckModelRunsOn(config, backend));
  RETURN_IF_ERROR(CheckSequenceParallel(config, sequence_parallel));
  ASSIGN_OR_RETURN(Dataset dataset, Dataset::LoadForJob(spec, options.base_dir, config.vocab_size));
  ASSIGN_OR_RETURN(const CheckpointTier checkpoint_tier,
                   ChooseCheckpointTier(spec, config, allocator.budget_bytes(), options.offload));
  ASSIGN_OR_RETURN(const EngineOptions engine_options,
                   ChooseEngineOptions(spec, config, allocator.budget_bytes(), checkpoint_tier));
  Engine engine(config, backend, engine_options);
  if (sequence_group.has_value()) engine.set_sequence_group(&*sequence_group);
  // A cancel reaches a step in progress within a sequence or a layer.
  const Engine::InterruptCheck interrupt = [observer]() -> absl::Status {
    if (!observer->AbandonRequested()) return absl::OkStatus();
    return absl::CancelledError("the run was cancelled during the step; it is abandoned");
  };
  engine.set_interrupt(interrupt);
  // LoRA: the base weights stay frozen and the optimizer trains the adapters.
  ASSIGN_OR_RETURN(std::optional<TrainedAdapters> lora,
                   CreateTrainedAdapters(spec.lora, config, backend, compute_dtype, world_size));
  OptimizerStateOptions state_options;
  state_options.weights = lora ? &lora->compute : &weights;
  state_options.initial = lora ? &lora->initial : &initial;
  state_options.separate_master = separate_master;
  state_options.comm = comm.get();
  state_options.offload = spec.train.optimizer_offload;
  state_options.shard_weights = shard_weights;
  state_options.compute_dtype = compute_dtype;
  // The embedding's gradient as the step's token rows where the planner
  // counts it so (it decides where that applies).
  state_options.embedding_row_capacity = EmbeddingRowCapacity(PlanRequestForSpec(spec, config));
  ASSIGN_OR_RETURN(std::unique_ptr<OptimizerState> optimizer,
                   CreateOptimizerState(state_options, backend, spec.train, engine));
  initial = ParameterStore();  // the host copy is no longer needed

  // The reference model of DPO / GRPO (a real second model, frozen), in the
  // compute dtype on the device.
  std::optional<ParameterStore> reference;
  const std::string reference_dir = ReferenceModelDir(spec);
  if (!reference_dir.empty() && !ReferenceIsLoraBase(spec)) {
    ASSIGN_OR_RETURN(const ParameterStore host,
                     LoadStore(ResolveJobPath(options.base_dir, reference_dir), &config, staging,
                               "reference weights"));
    ASSIGN_OR_RETURN(reference,
                     CopyStoreToDevice(host, backend, compute_dtype, "reference weights"));
  }

  // The run directory: claimed by rank 0 (the ranks share it), which alone
  // writes metrics and commits checkpoints; every rank learns the verdict.
  const std::string run_dir = RunDirectoryFor(spec, options.job_id, options.base_dir);
  std::optional<RunFence> fence;
  absl::Status claimed = absl::OkStatus();
  if (rank == 0) {
    absl::StatusOr<RunFence> claim =
        RunFence::Claim(run_dir, {options.job_id, TrajectoryHash(spec), options.attempt, spec.name},
                        ContinuesRun(spec, run_dir, options.base_dir));
    if (claim.ok()) fence = *std::move(claim);
    claimed = claim.status();
  }
  RETURN_IF_ERROR(AgreeOnRankZero(comm.get(), claimed, "claim the run directory"));
  // The layer checkpoints' store (host or disk tier), checked before the first step.
  ASSIGN_OR_RETURN(const std::unique_ptr<CheckpointStore> checkpoint_store,
                   OpenCheckpointStore(checkpoint_tier, spec, backend, options.base_dir, run_dir,
                                       options.offload));
  engine.set_checkpoint_store(checkpoint_store.get());
  TierMeter tiers(backend, checkpoint_store.get(), *optimizer, spec.train.optimizer_offload);
  // OK while this attempt may still write: its lease holds (every rank) and
  // no newer attempt took the run over (rank 0, which writes).
  auto may_write = [&]() -> absl::Status {
    RETURN_IF_ERROR(observer->CheckLease());
    return fence.has_value() ? fence->Check() : absl::OkStatus();
  };

  const uint64_t data_seed = static_cast<uint64_t>(spec.train.seed);
  DataCursor cursor(dataset.size(), data_seed, spec.train.shuffle);
  // A cursor saved by ToJson, for this dataset and order (resume, or an
  // abandoned step handing its examples back).
  auto restore_cursor = [&](const std::string& json) {
    return DataCursor::FromJson(json, dataset.size(), data_seed, spec.train.shuffle);
  };
  TrainerState state;
  state.job_name = spec.name;
  RunStart start_info;
  start_info.run_dir = run_dir;
  start_info.capacity_bytes = allocator.budget_bytes();
  // Resume this job's own run; else start from resume_from when given.
  std::optional<std::string> resume;
  if (options.resume) {
    ASSIGN_OR_RETURN(resume, FindLatestCheckpoint(run_dir));
  }
  if (!resume.has_value() && !spec.resume_from.empty()) {
    ASSIGN_OR_RETURN(resume, ResolveResumeFrom(ResolveJobPath(options.base_dir, spec.resume_from)));
    start_info.resumed_from = *resume;
  }
  if (resume.has_value()) {
    ASSIGN_OR_RETURN(state, optimizer->Load(*resume));
    ASSIGN_OR_RETURN(cursor, restore_cursor(state.data_cursor));
    LOG(INFO) << spec.name << ": continuing from " << *resume << " (step " << state.step << ")";
  }
  start_info.resumed_step = state.step;
  std::optional<MetricsLog> metrics;
  std::optional<TensorBoardLog> tensorboard;
  if (rank == 0) {
    RETURN_IF_ERROR(may_write());
    ASSIGN_OR_RETURN(metrics, MetricsLog::Open(run_dir + "/metrics.jsonl", state.step));
    ASSIGN_OR_RETURN(tensorboard, TensorBoardLog::Open(run_dir + "/tb", state.step + 1,
                                                       absl::ToUnixMicros(absl::Now()) * 1e-6));
  }
  const CheckpointSink sink{
      run_dir, options.attempt, [&] { return may_write(); },
      // Absolute, so that an adapter's base_model_name_or_path
      // works from any working directory.
      fs::absolute(ResolveJobPath(options.base_dir, spec.model)).lexically_normal().string()};

  Engine reference_engine(
      config, backend,
      {BackwardMode::kStream, engine_options.chunk_tokens, engine_options.logits_chunk_tokens});
  reference_engine.set_interrupt(interrupt);
  if (sequence_group.has_value()) reference_engine.set_sequence_group(&*sequence_group);
  ModelTensors w = BindModelTensors(weights);
  if (lora) AttachAdapters(lora->compute, w);
  std::optional<ModelTensors> ref_tensors;
  if (reference.has_value()) ref_tensors = BindModelTensors(*reference);
  if (ReferenceIsLoraBase(spec)) ref_tensors = BindModelTensors(weights);  // without adapters
  // Online GRPO samples each step's completions from these weights.
  std::unique_ptr<RolloutSampler> rollouts;
  if (spec.grpo.online()) {
    ASSIGN_OR_RETURN(rollouts, CreateRolloutSampler(spec, options, config, backend, run_dir));
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<StepObjective> objective,
      MakeStepObjective(spec, dataset, engine, w, reference_engine,
                        ref_tensors ? &*ref_tensors : nullptr, data_comm, rollouts.get()));

  // The validation set, loaded before the first step so that a bad file
  // fails the attempt at once.
  std::unique_ptr<Evaluator> evaluator;
  if (spec.eval.enabled()) {
    ASSIGN_OR_RETURN(evaluator, Evaluator::Create(spec, options.base_dir, config.vocab_size));
  }
  int64_t eval_step = 0;
  double eval_loss = 0;

  observer->OnStart(spec, start_info);
  TrainSummary summary;
  summary.first_step = state.step + 1;
  summary.last_step = state.step;
  // Until this run writes one, where it stands is the checkpoint it resumed.
  if (resume.has_value()) summary.last_checkpoint = *resume;
  summary.final_loss = state.last_loss;

  auto save = [&](int64_t step) -> absl::Status {
    RETURN_IF_ERROR(observer->CheckLease());
    state.step = step;
    state.attempt = options.attempt;
    state.data_cursor = cursor.ToJson();
    RETURN_IF_ERROR(
        WithStorageDetails(optimizer->Save(sink, state, spec.checkpoint.keep_last), run_dir));
    summary.last_checkpoint = CheckpointPath(run_dir, step);
    observer->OnCheckpoint(step, summary.last_checkpoint);
    return absl::OkStatus();
  };

  double comm_waited = 0;
  double a2a_seconds = 0;
  int64_t a2a_bytes = 0;
  for (int64_t step = state.step + 1; step <= spec.train.steps; ++step) {
    // A lapsed lease ends the attempt here, before it computes or writes more.
    RETURN_IF_ERROR(observer->CheckLease());
    ASSIGN_OR_RETURN(const bool stop, AnyRank(comm.get(), observer->StopRequested()));
    if (stop) {
      summary.stopped_early = true;
      break;
    }
    const auto start = Clock::now();
    const std::string cursor_before_step = cursor.ToJson();  // an abandoned step takes nothing
    const std::vector<int64_t> indices =
        RankShare(cursor.Next(spec.train.sequences_per_step), data_rank, data_world);
    optimizer->ZeroGradients();
    objective->set_step(step);
    absl::StatusOr<ObjectiveStepResult> ran = objective->Run(indices, optimizer->grads());
    if (ran.status().code() == absl::StatusCode::kCancelled && observer->AbandonRequested()) {
      // Nothing of this step is kept: the weights are those of the last
      // finished step, and its examples go back to the data cursor, so that
      // the checkpoint written below resumes exactly after that step.
      LOG(INFO) << spec.name << ": step " << step << " abandoned: " << ran.status().message();
      ASSIGN_OR_RETURN(cursor, restore_cursor(cursor_before_step));
      summary.stopped_early = true;
      break;
    }
    if (!ran.ok()) {
      return WithMemoryPlan(ran.status(), spec, config, engine_options, allocator.budget_bytes(),
                            checkpoint_tier);
    }
    ObjectiveStepResult result = *std::move(ran);
    RETURN_IF_ERROR(optimizer->FinishBackward());
    RETURN_IF_ERROR(SumOverRanks(data_comm, result));
    // The objectives count full fine-tuning's FLOPs; LoRA computes no frozen weight gradients.
    result.model_flops += static_cast<double>(result.tokens) * LoraFlopsPerTokenChange(config, w);
    ASSIGN_OR_RETURN(const double grad_norm, optimizer->GlobalGradNorm());
    if (!std::isfinite(grad_norm) || !std::isfinite(result.loss)) {
      return Diverged(step, result.loss, grad_norm, run_dir);
    }
    const double lr = LearningRate(spec.train, step);
    RETURN_IF_ERROR(optimizer->Update(lr, step, ClipScale(grad_norm, spec.train.max_grad_norm)));
    backend.Synchronize();  // the step's device work is part of its time
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

    StepReport report;
    report.step = step;
    report.total_steps = spec.train.steps;
    const absl::Time ended = absl::Now();
    report.time = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", ended, absl::UTCTimeZone());
    report.epoch = static_cast<double>(cursor.examples_taken()) /
                   static_cast<double>(std::max<int64_t>(1, dataset.size()));
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
    tiers.Fill(report);
    report.extra = result.extra;
    if (result.rollout.has_value()) {
      ASSIGN_OR_RETURN(report.rollout, SummariseRollouts(data_comm, *result.rollout, seconds));
    }
    if (evaluator != nullptr && evaluator->Due(step, spec.train.steps)) {
      // After the update: the loss of the weights this step produced.
      absl::StatusOr<EvalResult> evaluated = evaluator->Run(engine, w, data_comm);
      if (!evaluated.ok()) {
        return WithMemoryPlan(evaluated.status(), spec, config, engine_options,
                              allocator.budget_bytes(), checkpoint_tier);
      }
      eval_step = step;
      eval_loss = evaluated->loss;
      report.peak_bytes = allocator.peak_bytes();
    }
    report.eval_step = eval_step;
    report.eval_loss = eval_loss;
    if (sequence_group.has_value()) {
      // This rank's share of the group's exchanges during the step.
      report.extra["all_to_all_seconds"] = sequence_group->all_to_all_seconds() - a2a_seconds;
      report.extra["all_to_all_bytes"] = sequence_group->all_to_all_bytes() - a2a_bytes;
      a2a_seconds = sequence_group->all_to_all_seconds();
      a2a_bytes = sequence_group->all_to_all_bytes();
    }
    if (comm) {
      // Seconds of this step the training thread waited on collectives.
      const double waited = optimizer->comm_wait_seconds();
      report.extra["comm_wait_seconds"] = waited - comm_waited;
      comm_waited = waited;
    }
    if (metrics.has_value()) {
      RETURN_IF_ERROR(may_write());
      const nlohmann::json line = report.ToJson();
      RETURN_IF_ERROR(WithStorageDetails(metrics->Append(line.dump()), run_dir));
      RETURN_IF_ERROR(WithStorageDetails(
          tensorboard->AppendScalars(step, absl::ToUnixMicros(ended) * 1e-6, line), run_dir));
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
  // A run stopped early (cancel, preemption) keeps every step it finished.
  if (summary.stopped_early && summary.last_step >= summary.first_step &&
      summary.last_checkpoint != CheckpointPath(run_dir, summary.last_step)) {
    RETURN_IF_ERROR(save(summary.last_step));
  }
  summary.peak_bytes = allocator.peak_bytes();
  return summary;
}

}  // namespace

absl::StatusOr<TrainSummary> RunTraining(const JobSpec& spec, const TrainOptions& options,
                                         TrainingObserver* observer) {
  // Whatever input reaches, the attempt ends with a status, never by
  // taking the worker down.
  try {
    return Train(spec, options, observer);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("training ran out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("training stopped by an unexpected error: ", e.what()));
  }
}

}  // namespace sbp
