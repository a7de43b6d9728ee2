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
    if (!paths.work_dir.empty() && paths.confine) {
      confinement.emplace(FileConfinement{JobReadRoots(paths), {}});
    }
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
  if (r.sequence_parallel > 1) {
    absl::StrAppend(&text, ", each sequence split over ", r.sequence_parallel,
                    " ranks (sequence parallelism: ", plan.local_tokens, " tokens per rank)");
  }
  if (r.mode == BackwardMode::kStream) {
    absl::StrAppend(&text, " with chunk_tokens ", plan.chunk_tokens, " and logits_chunk_tokens ",
                    plan.logits_chunk_tokens);
  }
  return text;
}

std::string Need(const PlanRequest& request, const MemoryPlan& minimum, double margin) {
  const int64_t needed = RequiredMemory(minimum.peak_bytes, margin);
  return absl::StrCat(FormatByteSize(needed), " (", needed,
                      " bytes) per worker: ", Describe(request, minimum), " peaks at ",
                      FormatByteSize(minimum.peak_bytes), " (", SummarizeBreakdown(minimum),
                      ") plus a ", Percent(margin), " safety margin");
}

std::string Need(const AdmissionPlan& plan) {
  return Need(plan.request, plan.minimum, plan.safety_margin);
}

// "layer checkpoints in host memory (streambp.offload.checkpoints: host)".
std::string TierPhrase(const PlanRequest& r) {
  std::string text;
  switch (r.checkpoint_tier) {
    case CheckpointTier::kDevice:
      text = "layer checkpoints on the device";
      break;
    case CheckpointTier::kHost:
      text = "layer checkpoints in host memory (streambp.offload.checkpoints: host)";
      break;
    case CheckpointTier::kDisk:
      text = "layer checkpoints on local disk (streambp.offload.checkpoints: disk)";
      break;
  }
  if (r.optimizer_offload) absl::StrAppend(&text, " and optimizer state in host memory");
  return text;
}

// A tier's needs: "2.1 GiB (...) per worker: stream mode ... plus a 5%
// safety margin" (`detailed`: with the device's breakdown; else "2.1 GiB (...)
// per worker"), then ", and 300.0 GiB (...) of host memory: 280.0 GiB
// (host_layer_inputs 280.0 GiB, ...) plus the margin" and ", and 28.0 GiB
// (...) of offload disk: a file of 26.6 GiB plus the margin" where it needs them.
std::string TierNeed(const TierOption& t, double margin, bool detailed) {
  std::string text = detailed ? Need(t.request, t.minimum, margin)
                              : absl::StrCat(FormatByteSize(t.need.memory_bytes), " (",
                                             t.need.memory_bytes, " bytes) per worker");
  if (t.need.host_memory_bytes > 0) {
    MemoryPlan host_only;
    host_only.breakdown = t.minimum.host_breakdown;
    absl::StrAppend(&text, ", and ", FormatByteSize(t.need.host_memory_bytes), " (",
                    t.need.host_memory_bytes,
                    " bytes) of host memory: ", FormatByteSize(t.minimum.host_bytes), " (",
                    SummarizeBreakdown(host_only), ") plus the margin");
  }
  if (t.need.offload_disk_bytes > 0) {
    absl::StrAppend(&text, ", and ", FormatByteSize(t.need.offload_disk_bytes), " (",
                    t.need.offload_disk_bytes, " bytes) of offload disk: a file of ",
                    FormatByteSize(t.minimum.disk_bytes), " plus the margin");
  }
  return text;
}

std::string Plural(size_t n, const char* one, const char* many) { return n == 1 ? one : many; }

// The workers of one device as admission compares them with a need.
struct Shortfall {
  enum class Resource { kNone, kDevice, kHost, kDisk } resource = Resource::kNone;
  std::string text;                     // "host memory is short: ..."
  int64_t memory = 0, host_memory = 0;  // the worker to suggest against
};

// What keeps every worker of `device` from meeting `need`: device memory
// first, then host memory among the workers with enough device memory, then
// offload disk among those with both.
Shortfall FindShortfall(const WorkerNeed& need, DeviceKind device,
                        const std::vector<WorkerCapacity>& workers) {
  const std::string kind(DeviceKindName(device));
  Shortfall out;
  int64_t registered = 0, largest = 0;
  std::vector<const WorkerCapacity*> roomy, hosting;
  for (const WorkerCapacity& w : workers) {
    if (w.device != device) continue;
    ++registered;
    largest = std::max(largest, w.memory_bytes);
    if (w.memory_bytes < need.memory_bytes) continue;
    roomy.push_back(&w);
    if (need.host_memory_bytes <= 0 || w.host_memory_bytes >= need.host_memory_bytes) {
      hosting.push_back(&w);
    }
  }
  if (roomy.empty()) {
    out.resource = Shortfall::Resource::kDevice;
    out.memory = largest;
    out.text = absl::StrCat("device memory is short: the largest of ", registered, " registered ",
                            kind, " ", registered == 1 ? "worker has " : "workers has ",
                            FormatByteSize(largest), " (", largest, " bytes)");
    return out;
  }
  const std::string among =
      absl::StrCat(roomy.size(), " registered ", kind, " ",
                   Plural(roomy.size(), "worker", "workers"), " with enough device memory");
  if (hosting.empty()) {
    const WorkerCapacity* best = roomy.front();
    for (const WorkerCapacity* w : roomy) {
      if (w->host_memory_bytes > best->host_memory_bytes) best = w;
    }
    out.resource = Shortfall::Resource::kHost;
    out.memory = best->memory_bytes;
    out.host_memory = best->host_memory_bytes;
    out.text = best->host_memory_bytes > 0
                   ? absl::StrCat("host memory is short: the most any of the ", among,
                                  " offers is ", FormatByteSize(best->host_memory_bytes), " (",
                                  best->host_memory_bytes, " bytes)")
                   : absl::StrCat("host memory is short: none of the ", among,
                                  " offers host memory (sbp-worker --host-memory)");
    return out;
  }
  int64_t disk = 0;
  for (const WorkerCapacity* w : hosting) disk = std::max(disk, w->offload_disk_bytes);
  out.resource = Shortfall::Resource::kDisk;
  out.text = absl::StrCat(
      "offload disk is short: ",
      disk > 0 ? absl::StrCat("the most any of the ", hosting.size(), " ", kind, " ",
                              Plural(hosting.size(), "worker", "workers"),
                              " with enough device and host memory offers is ",
                              FormatByteSize(disk), " (", disk, " bytes)")
               : absl::StrCat("none of the ", hosting.size(), " ", kind, " ",
                              Plural(hosting.size(), "worker", "workers"),
                              " with enough device and host memory offers offload disk "
                              "(sbp-worker --offload-disk)"));
  return out;
}

// What would fit a worker of `memory` bytes, in the spec's terms, as far as
// `budget` allows.
std::vector<std::string> Suggestions(const PlanRequest& r, double margin, int64_t memory,
                                     PlanBudget& budget) {
  std::vector<std::string> out;
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
    // With sequence parallelism the world grows by whole groups of P ranks
    // (counted in groups here).
    PlanRequest more = *base;
    const int64_t group = std::max<int64_t>(r.sequence_parallel, 1);
    const int64_t max_groups = kMaxWorldSize / group;
    int64_t fail = r.world_size / group, found = 0;
    for (int64_t step = 1; !found && fail < max_groups; step *= 2) {
      const int64_t n = std::min<int64_t>(r.world_size / group + step, max_groups);
      more.world_size = n * group;
      if (fits(more).ok()) {
        found = n;
      } else {
        fail = n;
      }
      if (budget.exhausted()) break;
    }
    while (found > 0 && found - fail > 1 && !budget.exhausted()) {
      const int64_t n = fail + (found - fail) / 2;
      more.world_size = n * group;
      (fits(more).ok() ? found : fail) = n;
    }
    found *= group;
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
      if (n <= r.world_size || n % std::max<int64_t>(r.sequence_parallel, 1) != 0) continue;
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
  // Sequence parallelism splits the attention heads over the group: a model
  // whose heads do not split is bad input, refused at submit.
  if (absl::Status heads = CheckSequenceParallel(*source.config, spec.resources.sequence_parallel);
      !heads.ok()) {
    out.bad_input =
        absl::InvalidArgumentError(absl::StrCat(heads.message(), " (model ", source.where, ")"));
    out.note = absl::StrCat("memory not planned: ", heads.message());
    return out;
  }
  out.request = PlanRequestForSpec(spec, *source.config);
  out.safety_margin = DefaultSafetyMargin(spec.resources.device);
  const double margin = out.safety_margin;
  // `auto` runs in the fastest tier that fits the worker: device, host, then
  // disk (the disk tier only on workers that offer offload disk).
  const bool automatic = !spec.streambp.offload.checkpoints.has_value();
  std::vector<CheckpointTier> tiers = {out.request.checkpoint_tier};
  if (automatic) tiers = {CheckpointTier::kDevice, CheckpointTier::kHost, CheckpointTier::kDisk};
  for (CheckpointTier tier : tiers) {
    PlanRequest trial = out.request;
    trial.checkpoint_tier = tier;
    absl::StatusOr<MemoryPlan> minimum = PlanMinimum(trial);
    if (!minimum.ok()) {
      if (out.tiers.empty()) {
        out.note =
            absl::StrCat("memory not planned (", source.where, "): ", minimum.status().message(),
                         "; admitted without a planned memory requirement");
        return out;
      }
      continue;
    }
    TierOption option{trial, *std::move(minimum), {}};
    option.need.memory_bytes = RequiredMemory(option.minimum.peak_bytes, margin);
    if (option.minimum.host_bytes > 0) {
      option.need.host_memory_bytes = RequiredMemory(option.minimum.host_bytes, margin);
    }
    // An explicit disk tier is bounded by the worker's disk itself; auto
    // takes the disk tier only within a worker's offered offload disk.
    if (automatic && tier == CheckpointTier::kDisk) {
      option.need.offload_disk_bytes =
          std::max<int64_t>(1, RequiredMemory(option.minimum.disk_bytes, margin));
    }
    out.tiers.push_back(std::move(option));
  }
  out.planned = true;
  out.request = out.tiers.front().request;
  out.minimum = out.tiers.front().minimum;
  const int64_t budget = spec.resources.memory_bytes;
  for (TierOption& t : out.tiers) {
    WorkerNeed need = t.need;
    if (budget > 0) {
      if (budget < need.memory_bytes) continue;  // resources.memory is the job's device budget
      need.memory_bytes = budget;
    }
    std::vector<WorkerNeed> with = out.needs;
    with.push_back(need);
    if (WithoutDominated(with).size() == out.needs.size()) continue;  // a faster tier needs no more
    t.needed = true;
    out.needs.push_back(need);
  }
  if (!out.needs.empty()) {
    out.required_memory_bytes = out.needs.front().memory_bytes;
    out.required_host_memory_bytes = out.needs.front().host_memory_bytes;
    out.required_offload_disk_bytes = out.needs.front().offload_disk_bytes;
    out.alternative_needs.assign(out.needs.begin() + 1, out.needs.end());
  } else if (budget <= 0) {
    out.required_memory_bytes = out.tiers.front().need.memory_bytes;
  }
  out.note = absl::StrCat("memory plan from ", source.where, ": needs ",
                          TierNeed(out.tiers.front(), margin, /*detailed=*/true));
  if (automatic || out.request.checkpoint_tier != CheckpointTier::kDevice ||
      out.request.optimizer_offload) {
    absl::StrAppend(&out.note, " with its ", TierPhrase(out.request));
  }
  for (size_t i = 1; i < out.tiers.size(); ++i) {
    const TierOption& t = out.tiers[i];
    absl::StrAppend(&out.note, "; or with its ", TierPhrase(t.request), ", ",
                    TierNeed(t, margin, /*detailed=*/false));
  }
  if (automatic) {
    absl::StrAppend(&out.note, " (checkpoints: auto takes the fastest tier the worker fits)");
  }
  if (out.request.mode == BackwardMode::kStream &&
      (out.request.chunk_tokens == 0 || out.request.logits_chunk_tokens == 0)) {
    absl::StrAppend(&out.note, "; auto chunk sizes grow with the worker's memory");
  }
  return out;
}

namespace {

// The message of a job that fits none of `workers` (of its device) in the
// device tier: the planner's numbers and what would fit the largest worker.
std::string DeviceRefusal(const JobSpec& spec, const AdmissionPlan& plan,
                          const std::vector<WorkerCapacity>& workers, PlanBudget& budget) {
  const std::string device(DeviceKindName(spec.resources.device));
  int64_t registered = 0, largest = 0;
  for (const WorkerCapacity& w : workers) {
    if (w.device != spec.resources.device) continue;
    ++registered;
    largest = std::max(largest, w.memory_bytes);
  }
  std::string message =
      absl::StrCat("the job fits no registered ", device, " worker: it needs ", Need(plan),
                   ", but the largest of ", registered, " registered ", device, " ",
                   registered == 1 ? "worker has " : "workers has ", FormatByteSize(largest), " (",
                   largest, " bytes)");
  const std::vector<std::string> suggestions =
      Suggestions(plan.request, plan.safety_margin, largest, budget);
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
  return message;
}

// Why `t` fits none of `workers`, with what would fit, as far as `budget`
// allows (`automatic`: the job tries every tier itself).
std::string TierRefusal(const TierOption& t, DeviceKind device, double margin, bool automatic,
                        const std::vector<WorkerCapacity>& workers, PlanBudget& budget) {
  const Shortfall shortfall = FindShortfall(t.need, device, workers);
  const bool device_short = shortfall.resource == Shortfall::Resource::kDevice;
  std::string text =
      absl::StrCat("with its ", TierPhrase(t.request), " it needs ",
                   TierNeed(t, margin, /*detailed=*/device_short), "; ", shortfall.text);
  std::vector<std::string> suggestions;
  if (device_short) {
    suggestions = Suggestions(t.request, margin, shortfall.memory, budget);
  } else if (shortfall.resource == Shortfall::Resource::kHost) {
    if (!automatic && t.request.checkpoint_tier == CheckpointTier::kHost && budget.Spend(1)) {
      PlanRequest disk = t.request;
      disk.checkpoint_tier = CheckpointTier::kDisk;
      if (PlanTier(disk, shortfall.memory, margin, shortfall.host_memory, 0).ok()) {
        suggestions.push_back(
            "the disk tier: streambp.offload.checkpoints: disk (layer checkpoints in a file)");
      }
    }
    if (shortfall.host_memory > 0 && budget.Spend(kSeqLenSearchCost)) {
      absl::StatusOr<int64_t> longest =
          MaxSequenceLength(t.request, shortfall.memory, margin, shortfall.host_memory, 0);
      if (longest.ok() && *longest > 0) {
        suggestions.push_back(absl::StrCat("a shorter seq_len: at most ", *longest,
                                           " tokens in the ",
                                           CheckpointTierName(t.request.checkpoint_tier), " tier"));
      }
    }
  }
  if (!suggestions.empty()) {
    absl::StrAppend(&text, "; to fit: ", absl::StrJoin(suggestions, ", or "));
  }
  return text;
}

}  // namespace

absl::Status CheckAdmission(const JobSpec& spec, const AdmissionPlan& plan,
                            const std::vector<WorkerCapacity>& workers) {
  if (!plan.planned) return absl::OkStatus();
  if (plan.needs.empty()) {
    // resources.memory is below every tier's requirement.
    const int64_t needed = RequiredMemory(plan.minimum.peak_bytes, plan.safety_margin);
    return absl::ResourceExhaustedError(absl::StrCat(
        "resources.memory: ", FormatByteSize(spec.resources.memory_bytes),
        " is less than the job needs: ", Need(plan), "; raise resources.memory to at least ",
        FormatByteSize(needed), " or leave it out"));
  }
  std::vector<WorkerNeed> needs;  // as planned (not resources.memory)
  for (const TierOption& t : plan.tiers) {
    if (t.needed) needs.push_back(t.need);
  }
  int64_t registered = 0;
  for (const WorkerCapacity& w : workers) {
    if (w.device != spec.resources.device) continue;
    ++registered;
    if (MeetsAny({w.memory_bytes, w.host_memory_bytes, w.offload_disk_bytes}, needs)) {
      return absl::OkStatus();
    }
  }
  // No worker of this device yet: the job waits for one (the scheduler says so).
  if (registered == 0) return absl::OkStatus();
  PlanBudget budget;
  const TierOption& first = plan.tiers.front();
  std::string message;
  size_t next = 0;
  if (first.needed && first.request.checkpoint_tier == CheckpointTier::kDevice &&
      first.need.host_memory_bytes == 0) {
    // The device tier as it always was: the planner's numbers and suggestions.
    message = DeviceRefusal(spec, plan, workers, budget);
    next = 1;
  } else {
    message = absl::StrCat("the job fits no registered ", DeviceKindName(spec.resources.device),
                           " worker: ");
  }
  const bool automatic = !spec.streambp.offload.checkpoints.has_value();
  std::vector<std::string> tiers;
  for (size_t i = next; i < plan.tiers.size(); ++i) {
    if (!plan.tiers[i].needed) continue;
    tiers.push_back(TierRefusal(plan.tiers[i], spec.resources.device, plan.safety_margin, automatic,
                                workers, budget));
  }
  if (!tiers.empty()) {
    absl::StrAppend(
        &message, next == 0 ? "" : ". Nor in another memory tier: ", absl::StrJoin(tiers, ". Or "));
  }
  if (next == 0 && budget.exhausted()) {
    absl::StrAppend(&message,
                    "; the search for what would fit stopped at the planner's limit per submit");
  }
  return absl::ResourceExhaustedError(message);
}

}  // namespace sbp::server
