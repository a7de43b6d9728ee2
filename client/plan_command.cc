#include "client/plan_command.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/cli_common.h"
#include "client/spec_overrides.h"
#include "common/byte_size.h"
#include "common/status_macros.h"
#include "kernels/compute_device.h"
#include "nlohmann/json.hpp"
#include "worker/engine/lora_store.h"
#include "worker/engine/offload/checkpoint_tier.h"
#include "worker/engine/planner.h"
#include "worker/model/model_config.h"
#include "worker/train/job_plan.h"
#include "worker/train/job_spec.h"

namespace sbp::cli {
namespace {

using Json = nlohmann::ordered_json;

struct PlanOptions {
  std::string job;                     // a job spec: the request comes from it
  std::vector<std::string> overrides;  // --set on the job spec
  std::string model, preset;
  int64_t seq_len = 0;
  bool max_seq_len = false;
  std::string memory;
  int64_t world_size = 0;         // 0: --sequence-parallel (one group)
  int64_t sequence_parallel = 1;  // ranks sharing each sequence (Ulysses)
  int64_t zero_stage = 2;         // 3: the compute weights sharded too
  std::string mode;               // "": stream for one length, all three for --max-seq-len
  std::string chunk_tokens = "auto", logits_chunk_tokens = "auto";
  std::string precision = "fp32";
  std::string grad_precision;  // "": --precision
  std::string device;          // "": cuda for bf16, cpu otherwise
  std::string objective = "sft";
  double safety_margin = -1;  // < 0: the device's default
  bool bp_only = false;
  int64_t lora_r = 0;                     // > 0: a LoRA job of this rank
  int64_t packed_docs = 0;                // > 1: documents packed per sequence
  int64_t sequences_per_step = 1;         // (DPO: pairs) the embedding gradient's row set
  std::vector<std::string> lora_modules;  // empty: all seven
  std::string output;                     // "" or "json"
  // Memory tiers.
  std::string host_memory, disk;           // "": not given
  std::string checkpoints;                 // "": device, or auto with --host-memory / --disk
  std::string optimizer_offload = "auto";  // auto: on with --host-memory
  std::string link_bandwidth = "25GB/s", disk_bandwidth = "5GB/s";
};

// "auto" -> 0, else a positive integer; errors name the flag.
absl::StatusOr<int64_t> ParseChunk(const std::string& flag, const std::string& text) {
  if (text == "auto") return 0;
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected 'auto' or a positive number of rows (got '", text, "')"));
  }
  return value;
}

// A positive size, e.g. "1.8TiB"; errors name the flag.
absl::StatusOr<int64_t> ParseSize(const std::string& flag, const std::string& text,
                                  absl::string_view example) {
  absl::StatusOr<int64_t> bytes = ParseByteSize(text);
  if (!bytes.ok() || *bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected a positive size like ", example, " (got '", text, "')"));
  }
  return *bytes;
}

// Bytes per second from "25GB/s" or "25GB".
absl::StatusOr<double> ParseBandwidth(const std::string& flag, const std::string& text) {
  absl::string_view size = text;
  absl::ConsumeSuffix(&size, "/s");
  ASSIGN_OR_RETURN(const int64_t bytes, ParseSize(flag, std::string(size), "25GB/s"));
  return static_cast<double>(bytes);
}

struct Parsed {
  PlanRequest request;
  std::string model_name;
  std::optional<int64_t> memory;
  double margin = 0;
  int64_t host_memory = 0;  // 0: not given (unlimited)
  int64_t disk = 0;         // 0: not given (no disk for auto)
  // The checkpoint tier asked for; nullopt: auto (the fastest that fits).
  std::optional<CheckpointTier> tier = CheckpointTier::kDevice;
  double link_bandwidth = 0, disk_bandwidth = 0;  // bytes per second
  // Whether anything beyond the device tier's plan is asked about.
  bool tiers() const {
    return host_memory > 0 || disk > 0 || tier != CheckpointTier::kDevice ||
           request.optimizer_offload;
  }
};

// The budgets and bandwidths from the flags: --memory, --host-memory,
// --disk, --link-bandwidth, --disk-bandwidth.
absl::Status ParseBudget(const PlanOptions& o, Parsed* p) {
  if (!o.memory.empty()) {
    ASSIGN_OR_RETURN(p->memory, ParseSize("--memory", o.memory, "80GiB"));
  }
  if (!o.host_memory.empty()) {
    ASSIGN_OR_RETURN(p->host_memory, ParseSize("--host-memory", o.host_memory, "1.8TiB"));
  }
  if (!o.disk.empty()) {
    ASSIGN_OR_RETURN(p->disk, ParseSize("--disk", o.disk, "3.5TB"));
  }
  ASSIGN_OR_RETURN(p->link_bandwidth, ParseBandwidth("--link-bandwidth", o.link_bandwidth));
  ASSIGN_OR_RETURN(p->disk_bandwidth, ParseBandwidth("--disk-bandwidth", o.disk_bandwidth));
  return absl::OkStatus();
}

// --safety-margin, or the device's default.
absl::Status SetMargin(const PlanOptions& o, Parsed* p) {
  p->margin = o.safety_margin >= 0 ? o.safety_margin : DefaultSafetyMargin(p->request.device);
  if (p->margin >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--safety-margin: must be in [0, 1) (got ", p->margin, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Parsed> Parse(const PlanOptions& o) {
  Parsed p;
  PlanRequest& r = p.request;
  if (!o.preset.empty()) {
    ASSIGN_OR_RETURN(r.config, PresetConfig(o.preset));
    p.model_name = o.preset;
  } else {
    ASSIGN_OR_RETURN(r.config, LoadModelConfig(o.model + "/config.json"));
    p.model_name = o.model;
  }
  r.seq_len = o.seq_len;
  if (!o.mode.empty()) {
    ASSIGN_OR_RETURN(r.mode, ParseBackwardMode(o.mode));
  }
  ASSIGN_OR_RETURN(r.chunk_tokens, ParseChunk("--chunk-tokens", o.chunk_tokens));
  ASSIGN_OR_RETURN(r.logits_chunk_tokens,
                   ParseChunk("--logits-chunk-tokens", o.logits_chunk_tokens));
  r.precision = o.precision == "bf16" ? DType::kBF16 : DType::kF32;
  if (!o.grad_precision.empty()) {
    r.gradient_precision = o.grad_precision == "bf16" ? DType::kBF16 : DType::kF32;
  }
  const std::string device = !o.device.empty() ? o.device : o.precision == "bf16" ? "cuda" : "cpu";
  ASSIGN_OR_RETURN(const Device parsed_device, ParseDeviceName(device));
  r.device = parsed_device.kind;
  r.sequence_parallel = o.sequence_parallel;
  r.world_size = o.world_size > 0 ? o.world_size : o.sequence_parallel;
  if (r.world_size % r.sequence_parallel != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sequence-parallel: must divide --world-size (", r.world_size, ") (got ",
                     r.sequence_parallel, ")"));
  }
  RETURN_IF_ERROR(CheckSequenceParallel(r.config, r.sequence_parallel, "--sequence-parallel"));
  if (o.zero_stage == 3 && r.world_size == 1) {
    return absl::InvalidArgumentError(
        "--zero-stage: 3 shards the compute weights over the workers; it needs --world-size > 1");
  }
  if (o.zero_stage == 3 && o.lora_r > 0) {
    return absl::InvalidArgumentError("--zero-stage: 3 is not supported with --lora-r");
  }
  r.shard_weights = o.zero_stage == 3;
  ASSIGN_OR_RETURN(r.objective, ParsePlanObjective(o.objective));
  r.optimizer_state = !o.bp_only;
  r.packed_documents = o.packed_docs;
  // One CPU worker keeps the embedding's gradient as the step's token rows
  // (EmbeddingRowCapacity says where); a DPO pair is two sequences.
  r.embedding_row_sequences = o.sequences_per_step * (r.objective == PlanObjective::kDpo ? 2 : 1);
  if (o.lora_r > 0) {
    r.lora.r = o.lora_r;
    r.lora.alpha = static_cast<double>(o.lora_r);  // memory does not depend on alpha
    r.lora.target_modules = o.lora_modules.empty() ? LoraModuleNames() : o.lora_modules;
    if (const absl::Status valid = ValidateLoraOptions(r.lora); !valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--lora-r/--lora-modules: ", absl::StripPrefix(valid.message(), "lora.")));
    }
  } else if (!o.lora_modules.empty()) {
    return absl::InvalidArgumentError("--lora-modules needs --lora-r");
  }
  RETURN_IF_ERROR(ParseBudget(o, &p));
  const std::string checkpoints = !o.checkpoints.empty()            ? o.checkpoints
                                  : p.host_memory > 0 || p.disk > 0 ? "auto"
                                                                    : "device";
  if (checkpoints == "auto") {
    p.tier.reset();
  } else {
    ASSIGN_OR_RETURN(p.tier, ParseCheckpointTier(checkpoints));
  }
  r.checkpoint_tier = p.tier.value_or(CheckpointTier::kDevice);
  r.optimizer_offload =
      o.optimizer_offload == "on" || (o.optimizer_offload == "auto" && p.host_memory > 0);
  RETURN_IF_ERROR(SetMargin(o, &p));
  return p;
}

// The job spec's model: its config.json (a path as `sbp train` reads it), or
// a preset of that name.
absl::StatusOr<ModelConfig> JobModelConfig(const std::string& model) {
  absl::StatusOr<ModelConfig> config = LoadModelConfig(model + "/config.json");
  if (config.ok() || config.status().code() != absl::StatusCode::kNotFound) return config;
  if (absl::StatusOr<ModelConfig> preset = PresetConfig(model); preset.ok()) return preset;
  return absl::Status(config.status().code(), absl::StrCat("model: ", config.status().message()));
}

// `sbp plan JOB.yaml`: the planner's request as admission and the trainer
// make it from the spec (after --set), with the worker budget from the flags
// or the spec's resources.memory.
absl::StatusOr<Parsed> ParseJob(const PlanOptions& o) {
  ASSIGN_OR_RETURN(const std::string text, ReadJobSpecWithOverrides(o.job, o.overrides));
  ASSIGN_OR_RETURN(const JobSpec spec, ParseJobSpec(text, SpecSourceName(o.job, o.overrides)));
  ASSIGN_OR_RETURN(const ModelConfig config, JobModelConfig(spec.model));
  Parsed p;
  p.request = PlanRequestForSpec(spec, config);
  p.model_name = spec.model;
  RETURN_IF_ERROR(ParseBudget(o, &p));
  if (!p.memory.has_value() && spec.resources.memory_bytes > 0) {
    p.memory = spec.resources.memory_bytes;
  }
  p.tier = spec.streambp.offload.checkpoints;  // nullopt: auto, the fastest that fits
  if (!p.tier.has_value() && p.host_memory == 0 && p.disk == 0) p.tier = CheckpointTier::kDevice;
  p.request.checkpoint_tier = p.tier.value_or(CheckpointTier::kDevice);
  RETURN_IF_ERROR(SetMargin(o, &p));
  return p;
}

Json PlanJson(const PlanRequest& r, const MemoryPlan& plan) {
  Json breakdown = Json::object();
  for (const MemoryTerm& t : plan.breakdown) breakdown[t.name] = t.bytes;
  Json host_breakdown = Json::object();
  for (const MemoryTerm& t : plan.host_breakdown) host_breakdown[t.name] = t.bytes;
  return Json{{"peak_bytes", plan.peak_bytes},
              {"breakdown", breakdown},
              {"peak_phase", plan.peak_phase},
              {"mode", BackwardModeName(r.mode)},
              {"seq_len", plan.seq_len},
              {"chunk_tokens", plan.chunk_tokens},
              {"logits_chunk_tokens", plan.logits_chunk_tokens},
              {"precision", r.precision == DType::kBF16 ? "bf16" : "fp32"},
              {"gradient_precision",
               r.gradient_precision.value_or(r.precision) == DType::kBF16 ? "bf16" : "fp32"},
              {"device", r.device == DeviceKind::kCuda ? "cuda" : "cpu"},
              {"world_size", r.world_size},
              {"sequence_parallel", r.sequence_parallel},
              {"local_tokens", plan.local_tokens},
              {"objective", PlanObjectiveName(r.objective)},
              {"optimizer_state", r.optimizer_state},
              {"lora_r", r.lora.r},
              {"packed_documents", r.packed_documents},
              {"model_state_bytes", plan.model_state_bytes},
              {"device_overhead_bytes", plan.device_overhead_bytes},
              {"checkpoint_tier", CheckpointTierName(plan.checkpoint_tier)},
              {"optimizer_offload", r.optimizer_offload},
              {"host_bytes", plan.host_bytes},
              {"host_breakdown", host_breakdown},
              {"disk_bytes", plan.disk_bytes},
              {"copy_bytes_per_pass", plan.copy_bytes_per_pass},
              {"copy_bytes_per_step", plan.copy_bytes_per_step},
              {"all_to_all_bytes_per_pass", plan.all_to_all_bytes_per_pass}};
}

// Estimated seconds of a plan's copies: the checkpoints of one sequence pass
// over the host link (the disk tier: at the slower of the link and the disk,
// the two overlapping; on the CPU at the disk's rate alone), the optimizer's
// over the link.
double CheckpointCopySeconds(const Parsed& p, const MemoryPlan& plan) {
  double rate = p.link_bandwidth;
  if (plan.checkpoint_tier == CheckpointTier::kDisk) {
    rate = p.request.device == DeviceKind::kCuda ? std::min(p.link_bandwidth, p.disk_bandwidth)
                                                 : p.disk_bandwidth;
  }
  return static_cast<double>(plan.copy_bytes_per_pass) / rate;
}

double OptimizerCopySeconds(const Parsed& p, const MemoryPlan& plan) {
  return static_cast<double>(plan.copy_bytes_per_step) / p.link_bandwidth;
}

std::string BandwidthText(double bytes_per_second) {
  return absl::StrFormat("%.3g GB/s", bytes_per_second / 1e9);
}

void PrintTerms(const std::vector<MemoryTerm>& terms, int64_t total) {
  size_t width = 4;
  for (const MemoryTerm& t : terms) width = std::max(width, t.name.size());
  for (const MemoryTerm& t : terms) {
    const double share =
        total > 0 ? 100.0 * static_cast<double>(t.bytes) / static_cast<double>(total) : 0.0;
    std::printf("  %-*s  %10s  %5.1f%%  %s\n", static_cast<int>(width), t.name.c_str(),
                FormatByteSize(t.bytes).c_str(), share, t.detail.c_str());
  }
}

void PrintPlanText(const Parsed& p, const MemoryPlan& plan) {
  const PlanRequest& r = p.request;
  std::printf("%s, %s mode, seq_len %lld", p.model_name.c_str(),
              std::string(BackwardModeName(r.mode)).c_str(), static_cast<long long>(plan.seq_len));
  if (r.mode == BackwardMode::kStream) {
    std::printf(", chunk_tokens %lld, logits_chunk_tokens %lld",
                static_cast<long long>(plan.chunk_tokens),
                static_cast<long long>(plan.logits_chunk_tokens));
  }
  std::printf(", %s on %s, %lld worker%s%s\n", r.precision == DType::kBF16 ? "bf16" : "fp32",
              r.device == DeviceKind::kCuda ? "cuda" : "cpu", static_cast<long long>(r.world_size),
              r.world_size == 1 ? "" : "s (ZeRO-2)", r.optimizer_state ? "" : ", backprop only");
  if (r.sequence_parallel > 1) {
    std::printf(
        "sequence parallel %lld: %lld tokens per rank, %lld query / %lld KV heads per rank in "
        "attention; all-to-all %s sent per rank per sequence pass (forward + backward)\n",
        static_cast<long long>(r.sequence_parallel), static_cast<long long>(plan.local_tokens),
        static_cast<long long>(r.config.num_attention_heads / r.sequence_parallel),
        static_cast<long long>(
            std::max<int64_t>(1, r.config.num_key_value_heads / r.sequence_parallel)),
        FormatByteSize(plan.all_to_all_bytes_per_pass).c_str());
  }
  if (r.lora.enabled()) {
    std::printf("LoRA r %lld on %s (frozen base)\n", static_cast<long long>(r.lora.r),
                absl::StrJoin(r.lora.target_modules, ", ").c_str());
  }
  std::printf("peak %s per worker (%lld bytes, %s phase)\n",
              FormatByteSize(plan.peak_bytes).c_str(), static_cast<long long>(plan.peak_bytes),
              plan.peak_phase.c_str());
  PrintTerms(plan.breakdown, plan.peak_bytes);
}

// The memory tiers' part of a plan: where the checkpoints live, host memory,
// the disk file and the copies with their estimated time.
void PrintTiersText(const Parsed& p, const MemoryPlan& plan) {
  const PlanRequest& r = p.request;
  const int64_t stored = std::max<int64_t>(r.config.num_hidden_layers - 1, 0);
  const char* act = r.precision == DType::kBF16 ? "bf16" : "f32";
  const char* rows = r.sequence_parallel > 1 ? "[T/P, H]" : "[T, H]";
  const std::string how = p.tier.has_value() ? "" : " (auto: the fastest tier that fits)";
  switch (plan.checkpoint_tier) {
    case CheckpointTier::kDevice:
      std::printf("checkpoints: device tier%s: %lld x %s %s on the device\n", how.c_str(),
                  static_cast<long long>(r.config.num_hidden_layers + 1), rows, act);
      break;
    case CheckpointTier::kHost:
      std::printf("checkpoints: host tier%s: 2 device slots, %lld x %s %s in host memory\n",
                  how.c_str(), static_cast<long long>(stored), rows, act);
      break;
    case CheckpointTier::kDisk:
      std::printf("checkpoints: disk tier%s: 2 device slots, %lld x %s %s in a file\n", how.c_str(),
                  static_cast<long long>(stored), rows, act);
      break;
  }
  std::printf("optimizer offload: %s\n",
              r.optimizer_offload
                  ? "on (f32 gradients, master weights and AdamW moments in host memory)"
                  : "off");
  std::printf("host memory %s (%lld bytes)\n", FormatByteSize(plan.host_bytes).c_str(),
              static_cast<long long>(plan.host_bytes));
  PrintTerms(plan.host_breakdown, plan.host_bytes);
  std::printf("disk %s (%lld bytes)\n", FormatByteSize(plan.disk_bytes).c_str(),
              static_cast<long long>(plan.disk_bytes));
  if (plan.copy_bytes_per_pass > 0) {
    const bool disk = plan.checkpoint_tier == CheckpointTier::kDisk;
    std::printf(
        "copies: checkpoints %s per sequence (each stored input written and read once), "
        "~%.1f s at %s (%s)\n",
        FormatByteSize(plan.copy_bytes_per_pass).c_str(), CheckpointCopySeconds(p, plan),
        BandwidthText(disk ? (r.device == DeviceKind::kCuda
                                  ? std::min(p.link_bandwidth, p.disk_bandwidth)
                                  : p.disk_bandwidth)
                           : p.link_bandwidth)
            .c_str(),
        disk ? "the slower of --disk-bandwidth and --link-bandwidth" : "--link-bandwidth");
  }
  if (plan.copy_bytes_per_step > 0) {
    std::printf(
        "copies: optimizer %s per step of one sequence (f32 gradients down%s), ~%.1f s at %s "
        "(--link-bandwidth)\n",
        FormatByteSize(plan.copy_bytes_per_step).c_str(),
        r.optimizer_state ? ", updated weights up" : "", OptimizerCopySeconds(p, plan),
        BandwidthText(p.link_bandwidth).c_str());
  }
}

// The plan of one length: the tier asked for (auto: PlanTiers) with the
// largest auto chunks that fit --memory and the host and disk limits.
absl::StatusOr<MemoryPlan> PlanOne(const Parsed& p, const PlanRequest& r) {
  if (!p.memory.has_value()) return PlanMemory(r);
  if (!p.tier.has_value()) return PlanTiers(r, *p.memory, p.margin, p.host_memory, p.disk);
  if (!p.tiers()) return PlanAutoChunks(r, *p.memory, p.margin);
  return PlanTier(r, *p.memory, p.margin, p.host_memory, p.disk);
}

int RunOne(const Parsed& p, bool json) {
  PlanRequest r = p.request;
  std::optional<absl::Status> does_not_fit;
  absl::StatusOr<MemoryPlan> plan = PlanOne(p, r);
  if (plan.status().code() == absl::StatusCode::kResourceExhausted) {
    does_not_fit = plan.status();
    // Auto: the least device memory any tier it tried needs.
    if (!p.tier.has_value())
      r.checkpoint_tier = p.disk > 0 ? CheckpointTier::kDisk : CheckpointTier::kHost;
    plan = PlanMinimum(r);
  }
  if (!plan.ok()) return ReportError("plan", plan.status());
  // Without --memory the device is not limited (auto: the device tier); the
  // host and the disk still are.
  if (!p.memory.has_value() && !does_not_fit.has_value()) {
    std::vector<std::string> short_of;
    if (p.host_memory > 0 && plan->host_bytes > UsableBytes(p.host_memory, p.margin)) {
      short_of.push_back(absl::StrCat("host memory needs ", FormatByteSize(plan->host_bytes),
                                      " of ", FormatByteSize(UsableBytes(p.host_memory, p.margin)),
                                      " usable"));
    }
    if (p.disk > 0 && plan->disk_bytes > UsableBytes(p.disk, p.margin)) {
      short_of.push_back(absl::StrCat("the disk needs ", FormatByteSize(plan->disk_bytes), " of ",
                                      FormatByteSize(UsableBytes(p.disk, p.margin)), " usable"));
    }
    if (!short_of.empty()) {
      does_not_fit = absl::ResourceExhaustedError(absl::StrJoin(short_of, "; "));
    }
  }
  if (json) {
    Json j = PlanJson(r, *plan);
    if (p.memory.has_value()) {
      j["memory_bytes"] = *p.memory;
      j["usable_bytes"] = UsableBytes(*p.memory, p.margin);
    }
    if (p.host_memory > 0) {
      j["host_memory_bytes"] = p.host_memory;
      j["usable_host_bytes"] = UsableBytes(p.host_memory, p.margin);
    }
    if (p.disk > 0) {
      j["disk_capacity_bytes"] = p.disk;
      j["usable_disk_bytes"] = UsableBytes(p.disk, p.margin);
    }
    if (p.memory.has_value() || p.host_memory > 0 || p.disk > 0) {
      j["fits"] = !does_not_fit.has_value();
    }
    if (p.tiers()) {
      j["link_bandwidth_bytes_per_second"] = p.link_bandwidth;
      j["disk_bandwidth_bytes_per_second"] = p.disk_bandwidth;
      j["copy_seconds_per_pass"] = CheckpointCopySeconds(p, *plan);
      j["copy_seconds_per_step"] = OptimizerCopySeconds(p, *plan);
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    PrintPlanText(p, *plan);
    if (p.tiers()) PrintTiersText(p, *plan);
    if (p.memory.has_value() && !does_not_fit.has_value()) {
      std::printf("fits in %s (%s usable after the %.0f%% safety margin)",
                  FormatByteSize(*p.memory).c_str(),
                  FormatByteSize(UsableBytes(*p.memory, p.margin)).c_str(), p.margin * 100);
      if (p.host_memory > 0) {
        std::printf(", host memory %s (%s usable)", FormatByteSize(p.host_memory).c_str(),
                    FormatByteSize(UsableBytes(p.host_memory, p.margin)).c_str());
      }
      if (p.disk > 0) {
        std::printf(", disk %s (%s usable)", FormatByteSize(p.disk).c_str(),
                    FormatByteSize(UsableBytes(p.disk, p.margin)).c_str());
      }
      std::printf("\n");
    }
  }
  if (does_not_fit.has_value()) {
    std::fprintf(stderr, "sbp plan: does not fit: %s\n",
                 std::string(does_not_fit->message()).c_str());
    return kExitFailed;
  }
  return kExitOk;
}

// The tiers --max-seq-len reports: the one asked for, or for auto the device
// and each tier whose resource was given (both, when neither was).
std::vector<CheckpointTier> ReportedTiers(const Parsed& p) {
  if (p.tier.has_value()) return {*p.tier};
  std::vector<CheckpointTier> tiers = {CheckpointTier::kDevice};
  if (p.host_memory > 0 || p.disk == 0) tiers.push_back(CheckpointTier::kHost);
  if (p.disk > 0) tiers.push_back(CheckpointTier::kDisk);
  return tiers;
}

// What bounds a longest sequence `longest` of `r` (the plan `at` at that
// length): the resource the next longer sequence is short of (device
// memory, host memory or the disk, each with its safety margin, planned with
// the smallest auto chunks) and that resource's terms that grow with the
// sequence, largest first at `longest` (at most three).
std::string BoundBy(const Parsed& p, PlanRequest r, int64_t longest, const MemoryPlan& at) {
  r.seq_len = longest + 1;
  absl::StatusOr<MemoryPlan> next = PlanMinimum(r);
  r.seq_len = std::max<int64_t>(longest / 2, 1);
  r.chunk_tokens = at.chunk_tokens;
  r.logits_chunk_tokens = at.logits_chunk_tokens;
  absl::StatusOr<MemoryPlan> half = PlanMemory(r);
  if (!next.ok() || !half.ok()) return "";
  const bool device = p.memory.has_value() && next->peak_bytes > UsableBytes(*p.memory, p.margin);
  const bool host = p.host_memory > 0 && next->host_bytes > UsableBytes(p.host_memory, p.margin);
  const bool disk = p.disk > 0 && next->disk_bytes > UsableBytes(p.disk, p.margin);
  std::string resource = device ? "device memory" : host ? "host memory" : disk ? "disk" : "";
  if (resource.empty()) return "";
  if (disk && !device && !host) {
    return absl::StrCat("bounded by the disk: a file of ", FormatByteSize(at.disk_bytes));
  }
  const std::vector<MemoryTerm>& terms = device ? at.breakdown : at.host_breakdown;
  const std::vector<MemoryTerm>& smaller = device ? half->breakdown : half->host_breakdown;
  std::vector<MemoryTerm> growing;
  for (const MemoryTerm& t : terms) {
    if (t.name == "allocator_rounding") continue;
    int64_t before = 0;
    for (const MemoryTerm& u : smaller) {
      if (u.name == t.name) before = u.bytes;
    }
    if (t.bytes > before) growing.push_back(t);
  }
  std::stable_sort(growing.begin(), growing.end(),
                   [](const MemoryTerm& a, const MemoryTerm& b) { return a.bytes > b.bytes; });
  std::vector<std::string> names;
  for (size_t i = 0; i < growing.size() && i < 3; ++i) {
    names.push_back(absl::StrCat(growing[i].name, " ", FormatByteSize(growing[i].bytes)));
  }
  return absl::StrCat("bounded by ", resource,
                      names.empty() ? "" : absl::StrCat(": ", absl::StrJoin(names, ", ")));
}

int RunMaxSeqLen(const Parsed& p, const std::string& mode_flag, bool json) {
  if (!p.memory.has_value()) {
    return ReportError("plan", absl::InvalidArgumentError("--max-seq-len needs --memory"));
  }
  std::vector<BackwardMode> modes = {BackwardMode::kFull, BackwardMode::kCheckpoint,
                                     BackwardMode::kStream};
  if (!mode_flag.empty()) modes = {p.request.mode};
  // Nested per tier unless only the device tier is asked for.
  const bool per_tier = p.tier != CheckpointTier::kDevice;
  const std::vector<CheckpointTier> tiers = ReportedTiers(p);
  Json j = Json::object();
  std::vector<std::string> lines;
  for (BackwardMode mode : modes) {
    Json by_tier = Json::object();
    for (CheckpointTier tier : tiers) {
      PlanRequest r = p.request;
      r.mode = mode;
      r.checkpoint_tier = tier;
      absl::StatusOr<int64_t> longest =
          p.tiers() ? MaxSequenceLength(r, *p.memory, p.margin, p.host_memory, p.disk)
                    : MaxSequenceLength(r, *p.memory, p.margin);
      if (!longest.ok()) return ReportError("plan", longest.status());
      if (per_tier) {
        by_tier[std::string(CheckpointTierName(tier))] = *longest;
      } else {
        j[std::string(BackwardModeName(mode))] = *longest;
      }
      std::string line = absl::StrFormat("  %-10s", BackwardModeName(mode));
      if (per_tier) absl::StrAppend(&line, absl::StrFormat("  %-6s", CheckpointTierName(tier)));
      absl::StrAppend(&line, absl::StrFormat("  %9d", *longest));
      if (*longest > 0) {
        r.seq_len = *longest;
        absl::StatusOr<MemoryPlan> plan =
            p.tiers() ? PlanTier(r, *p.memory, p.margin, p.host_memory, p.disk)
                      : PlanAutoChunks(r, *p.memory, p.margin);
        if (plan.ok()) {
          absl::StrAppend(&line, absl::StrFormat("  %10s", FormatByteSize(plan->peak_bytes)));
          if (per_tier) {
            absl::StrAppend(&line, absl::StrFormat("  %10s  %10s", FormatByteSize(plan->host_bytes),
                                                   FormatByteSize(plan->disk_bytes)));
          }
          if (mode == BackwardMode::kStream) {
            absl::StrAppend(&line, absl::StrFormat("  chunk_tokens %d, logits_chunk_tokens %d",
                                                   plan->chunk_tokens, plan->logits_chunk_tokens));
          }
          if (const std::string bound = BoundBy(p, r, *longest, *plan); !bound.empty()) {
            absl::StrAppend(&line, mode == BackwardMode::kStream ? "; " : "  ", bound);
          }
        }
      } else {
        absl::StrAppend(&line, p.tiers() ? "  (nothing fits: the model state alone is too large)"
                                         : "  (the model state alone does not fit)");
      }
      lines.push_back(line);
    }
    if (per_tier) j[std::string(BackwardModeName(mode))] = by_tier;
  }
  if (json) {
    std::printf("%s\n", j.dump().c_str());
    return kExitOk;
  }
  const PlanRequest& r = p.request;
  const std::string lora = r.lora.enabled() ? absl::StrCat(", LoRA r ", r.lora.r) : "";
  const std::string split =
      r.sequence_parallel > 1
          ? absl::StrCat(", each sequence split over ", r.sequence_parallel,
                         " ranks (sequence parallel; seq_len is the whole sequence)")
          : "";
  std::printf(
      "%s: longest sequence per worker of %s (%.0f%% safety margin), %s on %s, "
      "%lld worker%s%s%s%s\n",
      p.model_name.c_str(), FormatByteSize(*p.memory).c_str(), p.margin * 100,
      r.precision == DType::kBF16 ? "bf16" : "fp32", r.device == DeviceKind::kCuda ? "cuda" : "cpu",
      static_cast<long long>(r.world_size), r.world_size == 1 ? "" : "s (ZeRO-2)",
      r.optimizer_state ? "" : ", backprop only", lora.c_str(), split.c_str());
  if (p.tiers()) {
    std::printf("host memory %s, disk %s, optimizer offload %s\n",
                p.host_memory > 0 ? FormatByteSize(p.host_memory).c_str() : "unlimited",
                p.disk > 0 ? FormatByteSize(p.disk).c_str()
                           : (p.tier == CheckpointTier::kDisk ? "unlimited" : "none"),
                r.optimizer_offload ? "on" : "off");
  }
  if (per_tier) {
    std::printf("  %-10s  %-6s  %9s  %10s  %10s  %10s\n", "mode", "tier", "seq_len", "peak", "host",
                "disk");
  } else {
    std::printf("  %-10s  %9s  %10s\n", "mode", "seq_len", "peak");
  }
  for (const std::string& line : lines) std::printf("%s\n", line.c_str());
  return kExitOk;
}

}  // namespace

void AddPlanCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* plan = app.add_subcommand(
      "plan", "predict peak memory per worker, or the longest sequence that fits");
  auto* model = plan->add_option("--model", o->model, "Hugging Face model directory (config.json)");
  auto* preset = plan->add_option("--preset", o->preset, "preset name (qwen3-8b, ...)");
  model->excludes(preset);
  auto* seq_len = plan->add_option("--seq-len", o->seq_len, "tokens in the sequence")
                      ->check(CLI::PositiveNumber);
  auto* max_seq_len =
      plan->add_flag("--max-seq-len", o->max_seq_len, "longest sequence per mode in --memory");
  seq_len->excludes(max_seq_len);
  plan->add_option("--memory", o->memory,
                   "memory per worker, e.g. 80GiB: auto chunk sizes fill it (less the margin)");
  plan->add_option("--world-size", o->world_size,
                   "workers (ZeRO-2 when more than 1; default: --sequence-parallel)")
      ->check(CLI::Range(1, 1 << 20));
  plan->add_option("--sequence-parallel", o->sequence_parallel,
                   "ranks sharing each sequence (Ulysses sequence parallelism; divides "
                   "--world-size and the query heads): plans one rank, which holds 1/P of the "
                   "tokens; --seq-len and --max-seq-len are the whole sequence")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  plan->add_option("--zero-stage", o->zero_stage,
                   "2: ZeRO-2 (every worker keeps the whole compute weights); 3: ZeRO-3, the "
                   "compute weights sharded over --world-size too and gathered one layer at a "
                   "time (train.zero_stage)")
      ->check(CLI::Range(2, 3))
      ->capture_default_str();
  plan->add_option("--mode", o->mode,
                   "stream, checkpoint or full (default: stream; all three "
                   "with --max-seq-len)")
      ->check(CLI::IsMember({"stream", "checkpoint", "full"}));
  plan->add_option("--chunk-tokens", o->chunk_tokens,
                   "query chunk rows or auto (largest that fits --memory; the engine's default "
                   "without it)")
      ->capture_default_str();
  plan->add_option("--logits-chunk-tokens", o->logits_chunk_tokens, "logits chunk rows or auto")
      ->capture_default_str();
  plan->add_option("--precision", o->precision, "fp32 or bf16 (bf16 implies --device cuda)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  plan->add_option("--grad-precision", o->grad_precision,
                   "gradient dtype with one worker (default: --precision)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  plan->add_option("--device", o->device, "cpu or cuda (default: cuda for bf16, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  plan->add_option("--objective", o->objective, "sft, dpo or grpo (dpo/grpo add a reference model)")
      ->check(CLI::IsMember({"sft", "dpo", "grpo"}))
      ->capture_default_str();
  plan->add_option("--safety-margin", o->safety_margin,
                   "share of --memory kept free (default 0.05 on cpu, 0.10 on cuda)")
      ->check(CLI::Range(0.0, 0.99));
  plan->add_flag("--bp-only", o->bp_only,
                 "backpropagation only: no optimizer moments or master weights (the StreamBP "
                 "paper's setup)");
  plan->add_option("--sequences-per-step", o->sequences_per_step,
                   "sequences per optimizer step (DPO: pairs, GRPO: completions): on one CPU "
                   "worker the embedding's gradient is kept as their tokens' rows")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  plan->add_option("--packed-docs", o->packed_docs,
                   "documents packed per sequence (packing changes time, not memory; on CUDA "
                   "their offsets are counted)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--lora-r", o->lora_r,
                   "plan a LoRA job of this rank: frozen base, gradients and optimizer state "
                   "for the adapters only")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  plan->add_option("--lora-modules", o->lora_modules,
                   "LoRA target modules (default: q_proj k_proj v_proj o_proj gate_proj up_proj "
                   "down_proj)")
      ->delimiter(',');
  plan->add_option("--host-memory", o->host_memory,
                   "host memory per worker, e.g. 1.8TiB, for the host checkpoint tier and the "
                   "optimizer offload (the same safety margin applies)");
  plan->add_option("--disk", o->disk,
                   "local disk per worker for the disk checkpoint tier, e.g. 3.5TB");
  plan->add_option("--checkpoints", o->checkpoints,
                   "where the layer inputs kept for the backward live: device, host (pinned "
                   "host memory, 2 device slots), disk (a file, 2 device slots) or auto (the "
                   "fastest that fits --memory, --host-memory and --disk; with --max-seq-len "
                   "each tier whose resource is given). Default: auto with --host-memory or "
                   "--disk, else device")
      ->check(CLI::IsMember({"auto", "device", "host", "disk"}));
  plan->add_option("--optimizer-offload", o->optimizer_offload,
                   "on: f32 gradients, master weights and AdamW moments in host memory (the "
                   "device keeps the compute weights and a one-layer gradient cache); auto: on "
                   "when --host-memory is given (with --bp-only the host then holds only the "
                   "gradients)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  plan->add_option("--link-bandwidth", o->link_bandwidth,
                   "host<->device copy rate for the copy-time estimates (25 GB/s: a PCIe 5 x16 "
                   "link in practice; NVLink-C2C is faster)")
      ->capture_default_str();
  plan->add_option("--disk-bandwidth", o->disk_bandwidth,
                   "disk read/write rate for the disk tier's estimate (5 GB/s: one NVMe drive)")
      ->capture_default_str();
  plan->add_option("-o,--output", o->output, "output format: json")->check(CLI::IsMember({"json"}));
  plan->add_option("job", o->job,
                   "a job spec: plan it as admission does (its model, seq_len, mode, chunks, "
                   "precision, workers, LoRA, tiers); change it with --set");
  AddSetOption(*plan, o->overrides);
  plan->callback([o, plan, exit_code, model, preset, seq_len, max_seq_len] {
    PlanOptions options = *o;
    absl::StatusOr<Parsed> parsed;
    std::string mode_flag = options.mode;
    if (!options.job.empty()) {
      // The job says what it is; only the budget and the output come from flags.
      for (const char* flag :
           {"--model", "--preset", "--seq-len", "--mode", "--chunk-tokens", "--logits-chunk-tokens",
            "--precision", "--grad-precision", "--device", "--objective", "--world-size",
            "--sequence-parallel", "--zero-stage", "--lora-r", "--lora-modules", "--packed-docs",
            "--checkpoints", "--optimizer-offload", "--bp-only"}) {
        if (plan->count(flag) > 0) {
          throw CLI::ValidationError(absl::StrCat(flag, " comes from the job spec ", options.job,
                                                  ": change it with --set KEY=VALUE"));
        }
      }
      parsed = ParseJob(options);
      if (parsed.ok()) mode_flag = std::string(BackwardModeName(parsed->request.mode));
    } else {
      if (!o->overrides.empty()) throw CLI::ValidationError("--set needs a job spec");
      if (model->count() + preset->count() != 1) {
        throw CLI::ValidationError("one of --model, --preset or a job spec is required");
      }
      if (seq_len->count() + max_seq_len->count() != 1) {
        throw CLI::ValidationError("one of --seq-len or --max-seq-len is required");
      }
      if (options.max_seq_len) options.seq_len = 1;  // replaced per mode
      parsed = Parse(options);
    }
    if (!parsed.ok()) {
      *exit_code = ReportError("plan", parsed.status());
      return;
    }
    const bool json = options.output == "json";
    *exit_code =
        options.max_seq_len ? RunMaxSeqLen(*parsed, mode_flag, json) : RunOne(*parsed, json);
  });
}

}  // namespace sbp::cli
