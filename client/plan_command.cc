#include "client/plan_command.h"

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
#include "common/byte_size.h"
#include "common/status_macros.h"
#include "kernels/compute_device.h"
#include "nlohmann/json.hpp"
#include "worker/engine/lora_store.h"
#include "worker/engine/planner.h"
#include "worker/model/model_config.h"

namespace sbp::cli {
namespace {

using Json = nlohmann::ordered_json;

struct PlanOptions {
  std::string model, preset;
  int64_t seq_len = 0;
  bool max_seq_len = false;
  std::string memory;
  int64_t world_size = 1;
  std::string mode;  // "": stream for one length, all three for --max-seq-len
  std::string chunk_tokens = "auto", logits_chunk_tokens = "auto";
  std::string precision = "fp32";
  std::string grad_precision;  // "": --precision
  std::string device;          // "": cuda for bf16, cpu otherwise
  std::string objective = "sft";
  double safety_margin = -1;  // < 0: the device's default
  bool bp_only = false;
  int64_t lora_r = 0;                     // > 0: a LoRA job of this rank
  int64_t packed_docs = 0;                // > 1: documents packed per sequence
  std::vector<std::string> lora_modules;  // empty: all seven
  std::string output;                     // "" or "json"
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

struct Parsed {
  PlanRequest request;
  std::string model_name;
  std::optional<int64_t> memory;
  double margin = 0;
};

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
  r.world_size = o.world_size;
  ASSIGN_OR_RETURN(r.objective, ParsePlanObjective(o.objective));
  r.optimizer_state = !o.bp_only;
  r.packed_documents = o.packed_docs;
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
  if (!o.memory.empty()) {
    absl::StatusOr<int64_t> bytes = ParseByteSize(o.memory);
    if (!bytes.ok() || *bytes <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--memory: expected a positive size like 80GiB (got '", o.memory, "')"));
    }
    p.memory = *bytes;
  }
  p.margin = o.safety_margin >= 0 ? o.safety_margin : DefaultSafetyMargin(r.device);
  if (p.margin >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--safety-margin: must be in [0, 1) (got ", p.margin, ")"));
  }
  return p;
}

Json PlanJson(const PlanRequest& r, const MemoryPlan& plan) {
  Json breakdown = Json::object();
  for (const MemoryTerm& t : plan.breakdown) breakdown[t.name] = t.bytes;
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
              {"objective", PlanObjectiveName(r.objective)},
              {"optimizer_state", r.optimizer_state},
              {"lora_r", r.lora.r},
              {"packed_documents", r.packed_documents},
              {"model_state_bytes", plan.model_state_bytes},
              {"device_overhead_bytes", plan.device_overhead_bytes}};
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
  if (r.lora.enabled()) {
    std::printf("LoRA r %lld on %s (frozen base)\n", static_cast<long long>(r.lora.r),
                absl::StrJoin(r.lora.target_modules, ", ").c_str());
  }
  std::printf("peak %s per worker (%lld bytes, %s phase)\n",
              FormatByteSize(plan.peak_bytes).c_str(), static_cast<long long>(plan.peak_bytes),
              plan.peak_phase.c_str());
  size_t width = 4;
  for (const MemoryTerm& t : plan.breakdown) width = std::max(width, t.name.size());
  for (const MemoryTerm& t : plan.breakdown) {
    const double share =
        100.0 * static_cast<double>(t.bytes) / static_cast<double>(plan.peak_bytes);
    std::printf("  %-*s  %10s  %5.1f%%  %s\n", static_cast<int>(width), t.name.c_str(),
                FormatByteSize(t.bytes).c_str(), share, t.detail.c_str());
  }
}

int RunOne(const Parsed& p, bool json) {
  PlanRequest r = p.request;
  std::optional<absl::Status> does_not_fit;
  absl::StatusOr<MemoryPlan> plan;
  if (p.memory.has_value()) {
    plan = PlanAutoChunks(r, *p.memory, p.margin);
    if (plan.status().code() == absl::StatusCode::kResourceExhausted) {
      does_not_fit = plan.status();
      plan = PlanMinimum(r);
    }
  } else {
    plan = PlanMemory(r);
  }
  if (!plan.ok()) return ReportError("plan", plan.status());
  if (json) {
    Json j = PlanJson(r, *plan);
    if (p.memory.has_value()) {
      j["memory_bytes"] = *p.memory;
      j["usable_bytes"] = UsableBytes(*p.memory, p.margin);
      j["fits"] = !does_not_fit.has_value();
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    PrintPlanText(p, *plan);
    if (p.memory.has_value() && !does_not_fit.has_value()) {
      std::printf("fits in %s (%s usable after the %.0f%% safety margin)\n",
                  FormatByteSize(*p.memory).c_str(),
                  FormatByteSize(UsableBytes(*p.memory, p.margin)).c_str(), p.margin * 100);
    }
  }
  if (does_not_fit.has_value()) {
    std::fprintf(stderr, "sbp plan: does not fit: %s\n",
                 std::string(does_not_fit->message()).c_str());
    return kExitFailed;
  }
  return kExitOk;
}

int RunMaxSeqLen(const Parsed& p, const std::string& mode_flag, bool json) {
  if (!p.memory.has_value()) {
    return ReportError("plan", absl::InvalidArgumentError("--max-seq-len needs --memory"));
  }
  std::vector<BackwardMode> modes = {BackwardMode::kFull, BackwardMode::kCheckpoint,
                                     BackwardMode::kStream};
  if (!mode_flag.empty()) modes = {p.request.mode};
  Json j = Json::object();
  std::vector<std::string> lines;
  for (BackwardMode mode : modes) {
    PlanRequest r = p.request;
    r.mode = mode;
    absl::StatusOr<int64_t> longest = MaxSequenceLength(r, *p.memory, p.margin);
    if (!longest.ok()) return ReportError("plan", longest.status());
    j[std::string(BackwardModeName(mode))] = *longest;
    std::string line = absl::StrFormat("  %-10s  %9d", BackwardModeName(mode), *longest);
    if (*longest > 0) {
      r.seq_len = *longest;
      absl::StatusOr<MemoryPlan> plan = PlanAutoChunks(r, *p.memory, p.margin);
      if (plan.ok()) {
        absl::StrAppend(&line, absl::StrFormat("  %10s", FormatByteSize(plan->peak_bytes)));
        if (mode == BackwardMode::kStream) {
          absl::StrAppend(&line, absl::StrFormat("  chunk_tokens %d, logits_chunk_tokens %d",
                                                 plan->chunk_tokens, plan->logits_chunk_tokens));
        }
      }
    } else {
      absl::StrAppend(&line, "  (the model state alone does not fit)");
    }
    lines.push_back(line);
  }
  if (json) {
    std::printf("%s\n", j.dump().c_str());
    return kExitOk;
  }
  const PlanRequest& r = p.request;
  std::printf(
      "%s: longest sequence per worker of %s (%.0f%% safety margin), %s on %s, "
      "%lld worker%s%s%s\n",
      p.model_name.c_str(), FormatByteSize(*p.memory).c_str(), p.margin * 100,
      r.precision == DType::kBF16 ? "bf16" : "fp32", r.device == DeviceKind::kCuda ? "cuda" : "cpu",
      static_cast<long long>(r.world_size), r.world_size == 1 ? "" : "s (ZeRO-2)",
      r.optimizer_state ? "" : ", backprop only",
      r.lora.enabled() ? absl::StrCat(", LoRA r ", r.lora.r).c_str() : "");
  std::printf("  %-10s  %9s  %10s\n", "mode", "seq_len", "peak");
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
  plan->add_option("--world-size", o->world_size, "workers (ZeRO-2 when more than 1)")
      ->check(CLI::Range(1, 1 << 20))
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
  plan->add_option("-o,--output", o->output, "output format: json")->check(CLI::IsMember({"json"}));
  plan->callback([o, exit_code, model, preset, seq_len, max_seq_len] {
    if (model->count() + preset->count() != 1) {
      throw CLI::ValidationError("one of --model or --preset is required");
    }
    if (seq_len->count() + max_seq_len->count() != 1) {
      throw CLI::ValidationError("one of --seq-len or --max-seq-len is required");
    }
    PlanOptions options = *o;
    if (options.max_seq_len) options.seq_len = 1;  // replaced per mode
    absl::StatusOr<Parsed> parsed = Parse(options);
    if (!parsed.ok()) {
      *exit_code = ReportError("plan", parsed.status());
      return;
    }
    const bool json = options.output == "json";
    *exit_code =
        options.max_seq_len ? RunMaxSeqLen(*parsed, options.mode, json) : RunOne(*parsed, json);
  });
}

}  // namespace sbp::cli
