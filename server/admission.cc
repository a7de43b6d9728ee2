#include "server/admission.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/byte_size.h"
#include "common/file_confinement.h"
#include "server/job_manager.h"
#include "server/records.h"

namespace sbp::server {
namespace {

struct ConfigSource {
  std::optional<ModelConfig> config;
  std::string where;       // "examples/models/m/config.json" or "preset qwen3-8b"
  std::string problem;     // why there is no config
  absl::Status bad_input;  // the config.json exists but is hostile or malformed
};

// config.json of the spec's model directory, else a preset of that name.
ConfigSource FindModelConfig(const std::string& model, const PathPolicy& paths) {
  ConfigSource out;
  std::string problem;
  const std::string area = JobArea(paths);
  if (std::filesystem::path(model).is_absolute() || !area.empty()) {
    const std::string file =
        (std::filesystem::path(ResolveJobPath(area, model)) / "config.json").string();
    // Only where the job may read: checked on the path before the open (so a
    // refusal says nothing of what lies outside), then on the descriptor.
    if (absl::Status allowed = CheckJobReadPath("model", file, paths); !allowed.ok()) {
      out.problem = std::string(allowed.message());
      out.bad_input = std::move(allowed);
      return out;
    }
    std::optional<ScopedFileConfinement> confinement;
    if (!paths.work_dir.empty()) confinement.emplace(FileConfinement{JobReadRoots(paths), {}});
    absl::StatusOr<ModelConfig> config = LoadModelConfig(file);
    if (config.ok()) {
      out.config = *std::move(config);
      out.where = file;
      return out;
    }
    problem = std::string(config.status().message());
    if (config.status().code() != absl::StatusCode::kNotFound) {
      out.problem = problem;  // a broken config.json is not replaced by a preset
      if (config.status().code() == absl::StatusCode::kInvalidArgument) {
        out.bad_input = absl::InvalidArgumentError(absl::StrCat("model: ", problem));
      }
      return out;
    }
  } else {
    problem = absl::StrCat("the model path '", model,
                           "' is relative and the coordinator has no --work-dir to resolve it");
  }
  absl::StatusOr<ModelConfig> preset = PresetConfig(model);
  if (preset.ok()) {
    out.config = *std::move(preset);
    out.where = absl::StrCat("preset ", model);
    return out;
  }
  out.problem = std::move(problem);
  return out;
}

// The least worker memory whose usable share holds `peak` bytes.
int64_t RequiredMemory(int64_t peak, double margin) {
  int64_t memory = static_cast<int64_t>(std::ceil(static_cast<double>(peak) / (1 - margin)));
  while (UsableBytes(memory, margin) < peak) ++memory;
  return memory;
}

// The planner work that explaining one refusal may take. CheckAdmission runs
// under the job manager's lock, which heartbeats also need, so the search for
// suggestions is bounded twice: by its shape (world sizes are bisected, not
// tried one by one up to kMaxWorldSize; at most about 600 units in all) and
// by an allowance: each candidate plan costs one unit, a seq_len search
// (about 45 candidate plans) kSeqLenSearchCost, and the wall clock is capped.
// When the allowance is spent the message says so and lists what was found
// until then.
constexpr int kPlanBudget = 1000;
constexpr int kSeqLenSearchCost = 48;
constexpr absl::Duration kPlanTimeBudget = absl::Milliseconds(250);

class PlanBudget {
 public:
  PlanBudget() : deadline_(absl::Now() + kPlanTimeBudget) {}
  // False (and exhausted from then on) when `units` more would exceed it.
  bool Spend(int units) {
    if (exhausted_ || used_ + units > kPlanBudget || absl::Now() > deadline_) {
      exhausted_ = true;
      return false;
    }
    used_ += units;
    return true;
  }
  bool exhausted() const { return exhausted_; }

 private:
  absl::Time deadline_;
  int used_ = 0;
  bool exhausted_ = false;
};

std::string Percent(double fraction) { return absl::StrCat(std::round(fraction * 100), "%"); }

// "stream mode at seq_len 8192 with chunk_tokens 64 and logits_chunk_tokens 64".
std::string Describe(const PlanRequest& r, const MemoryPlan& plan) {
  std::string text = absl::StrCat(BackwardModeName(r.mode), " mode at seq_len ", r.seq_len);
  if (r.world_size > 1) absl::StrAppend(&text, " on ", r.world_size, " workers (ZeRO-2)");
  if (r.mode == BackwardMode::kStream) {
    absl::StrAppend(&text, " with chunk_tokens ", plan.chunk_tokens, " and logits_chunk_tokens ",
                    plan.logits_chunk_tokens);
  }
  return text;
}

std::string Need(const AdmissionPlan& plan) {
  const int64_t needed = RequiredMemory(plan.minimum.peak_bytes, plan.safety_margin);
  return absl::StrCat(FormatByteSize(needed), " (", needed,
                      " bytes) per worker: ", Describe(plan.request, plan.minimum), " peaks at ",
                      FormatByteSize(plan.minimum.peak_bytes), " (",
                      SummarizeBreakdown(plan.minimum), ") plus a ", Percent(plan.safety_margin),
                      " safety margin");
}

// What would fit a worker of `memory` bytes, in the spec's terms, as far as
// `budget` allows.
std::vector<std::string> Suggestions(const AdmissionPlan& plan, int64_t memory,
                                     PlanBudget& budget) {
  std::vector<std::string> out;
  const double margin = plan.safety_margin;
  const PlanRequest& r = plan.request;
  auto fits = [&](const PlanRequest& trial) -> absl::StatusOr<MemoryPlan> {
    if (!budget.Spend(1)) return absl::DeadlineExceededError("planner budget spent");
    return PlanAutoChunks(trial, memory, margin);
  };
  auto longest = [&](const PlanRequest& trial) -> absl::StatusOr<int64_t> {
    if (!budget.Spend(kSeqLenSearchCost)) {
      return absl::DeadlineExceededError("planner budget spent");
    }
    return MaxSequenceLength(trial, memory, margin);
  };
  PlanRequest stream = r;
  stream.mode = BackwardMode::kStream;
  stream.chunk_tokens = stream.logits_chunk_tokens = 0;
  if (r.mode != BackwardMode::kStream && fits(stream).ok()) {
    out.push_back("streambp.mode: stream (StreamBP never holds T x V logits)");
  }
  if (r.mode == BackwardMode::kStream && (r.chunk_tokens > 0 || r.logits_chunk_tokens > 0)) {
    if (absl::StatusOr<MemoryPlan> smaller = fits(stream); smaller.ok()) {
      out.push_back(absl::StrCat("smaller chunks: streambp.chunk_tokens: ", smaller->chunk_tokens,
                                 ", logits_chunk_tokens: ", smaller->logits_chunk_tokens,
                                 " (or auto)"));
    }
  }
  for (const PlanRequest* base : std::vector<const PlanRequest*>{&r, &stream}) {
    if (base == &stream && r.mode == BackwardMode::kStream) break;
    // The fewest workers that fit: ZeRO-2's per-worker share falls as the
    // world grows, so probe doubling steps, then bisect the last one.
    PlanRequest more = *base;
    int64_t fail = r.world_size, found = 0;
    for (int64_t step = 1; !found && fail < kMaxWorldSize; step *= 2) {
      const int64_t n = std::min<int64_t>(r.world_size + step, kMaxWorldSize);
      more.world_size = n;
      if (fits(more).ok()) {
        found = n;
      } else {
        fail = n;
      }
      if (budget.exhausted()) break;
    }
    while (found > 0 && found - fail > 1 && !budget.exhausted()) {
      more.world_size = fail + (found - fail) / 2;
      (fits(more).ok() ? found : fail) = more.world_size;
    }
    if (found > 0) {
      out.push_back(absl::StrCat("more workers: resources.world_size: ", found,
                                 base == &stream ? " with streambp.mode: stream" : "",
                                 " (ZeRO-2 shards gradients and optimizer state)"));
      break;
    }
  }
  const bool more_workers_fit = !out.empty() && absl::StartsWith(out.back(), "more workers");
  if (absl::StatusOr<int64_t> max_len = longest(r); max_len.ok() && *max_len > 0) {
    out.push_back(absl::StrCat("a shorter seq_len: at most ", *max_len, " tokens in ",
                               BackwardModeName(r.mode), " mode"));
  } else if (!more_workers_fit) {
    // Neither alone: the fewest workers (powers of two) whose shards leave
    // room for some sequence in stream mode, and how long it may be.
    for (int64_t n = 2; n <= kMaxWorldSize && !budget.exhausted(); n *= 2) {
      if (n <= r.world_size) continue;
      PlanRequest sharded = stream;
      sharded.world_size = n;
      absl::StatusOr<int64_t> sharded_len = longest(sharded);
      if (!sharded_len.ok() || *sharded_len == 0) continue;
      out.push_back(absl::StrCat("more workers and a shorter sequence: resources.world_size: ", n,
                                 " with seq_len at most ", *sharded_len,
                                 " tokens in stream mode (ZeRO-2 shards gradients and "
                                 "optimizer state)"));
      break;
    }
  }
  return out;
}

}  // namespace

AdmissionPlan PlanAdmission(const JobSpec& spec, const PathPolicy& paths) {
  AdmissionPlan out;
  out.required_memory_bytes = spec.resources.memory_bytes;
  const ConfigSource source = FindModelConfig(spec.model, paths);
  out.bad_input = source.bad_input;
  if (!source.config.has_value()) {
    out.note = absl::StrCat("memory not planned: ", source.problem,
                            "; admitted without a planned memory requirement");
    return out;
  }
  out.request = PlanRequestForSpec(spec, *source.config);
  absl::StatusOr<MemoryPlan> minimum = PlanMinimum(out.request);
  if (!minimum.ok()) {
    out.note = absl::StrCat("memory not planned (", source.where, "): ", minimum.status().message(),
                            "; admitted without a planned memory requirement");
    return out;
  }
  out.planned = true;
  out.minimum = *std::move(minimum);
  out.safety_margin = DefaultSafetyMargin(spec.resources.device);
  const int64_t needed = RequiredMemory(out.minimum.peak_bytes, out.safety_margin);
  if (spec.resources.memory_bytes <= 0) out.required_memory_bytes = needed;
  out.note = absl::StrCat("memory plan from ", source.where, ": needs ", Need(out));
  if (out.request.mode == BackwardMode::kStream &&
      (out.request.chunk_tokens == 0 || out.request.logits_chunk_tokens == 0)) {
    absl::StrAppend(&out.note, "; auto chunk sizes grow with the worker's memory");
  }
  return out;
}

absl::Status CheckAdmission(const JobSpec& spec, const AdmissionPlan& plan,
                            const std::vector<WorkerCapacity>& workers) {
  if (!plan.planned) return absl::OkStatus();
  const int64_t needed = RequiredMemory(plan.minimum.peak_bytes, plan.safety_margin);
  if (spec.resources.memory_bytes > 0 && spec.resources.memory_bytes < needed) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "resources.memory: ", FormatByteSize(spec.resources.memory_bytes),
        " is less than the job needs: ", Need(plan), "; raise resources.memory to at least ",
        FormatByteSize(needed), " or leave it out"));
  }
  const std::string device(DeviceKindName(spec.resources.device));
  int64_t registered = 0, largest = 0;
  for (const WorkerCapacity& w : workers) {
    if (w.device != spec.resources.device) continue;
    ++registered;
    largest = std::max(largest, w.memory_bytes);
  }
  // No worker of this device yet: the job waits for one (the scheduler says so).
  if (registered == 0 || largest >= needed) return absl::OkStatus();
  std::string message =
      absl::StrCat("the job fits no registered ", device, " worker: it needs ", Need(plan),
                   ", but the largest of ", registered, " registered ", device, " ",
                   registered == 1 ? "worker has " : "workers has ", FormatByteSize(largest), " (",
                   largest, " bytes)");
  PlanBudget budget;
  const std::vector<std::string> suggestions = Suggestions(plan, largest, budget);
  if (budget.exhausted()) {
    absl::StrAppend(&message, suggestions.empty() ? "; " : ". To fit a ",
                    suggestions.empty() ? "" : FormatByteSize(largest),
                    suggestions.empty() ? "" : " worker: ", absl::StrJoin(suggestions, "; "),
                    suggestions.empty() ? "" : "; ",
                    "the search for what would fit stopped at the planner's limit per submit");
  } else if (suggestions.empty()) {
    absl::StrAppend(&message, "; no chunk size, mode or world size fits: the model state alone is ",
                    FormatByteSize(plan.minimum.model_state_bytes), " per worker");
  } else {
    absl::StrAppend(&message, ". To fit a ", FormatByteSize(largest),
                    " worker: ", absl::StrJoin(suggestions, "; "));
  }
  return absl::ResourceExhaustedError(message);
}

}  // namespace sbp::server
