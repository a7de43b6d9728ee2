#include "client/job_output.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/progress.h"
#include "client/proto_json.h"
#include "client/table.h"
#include "common/byte_size.h"
#include "proto/device_kind.h"

namespace sbp::cli {
namespace {

namespace v1 = streambp::v1;

std::string StepText(const v1::JobProgress& p) {
  if (p.total_steps() <= 0) return "-";
  return absl::StrCat(p.step(), "/", p.total_steps());
}

std::string LossText(const v1::JobProgress& p) {
  return p.step() > 0 ? absl::StrFormat("%.4f", p.loss()) : "-";
}

std::string Bytes(int64_t bytes) { return bytes > 0 ? FormatByteSize(bytes) : "-"; }

std::string TimeText(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  const absl::Time time = absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
  return absl::StrCat(absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", time, absl::UTCTimeZone()), " (",
                      Age(t), " ago)");
}

// The memory tiers, when the job uses one off the device: where its layer
// checkpoints and optimizer state live, what the host and disk hold, and the
// last step's copies.
void AddTierRows(const v1::JobProgress& p, Table& t) {
  const std::string tier = p.checkpoint_tier().empty() ? "device" : p.checkpoint_tier();
  if (tier == "device" && !p.optimizer_offload()) return;
  std::string where = "layer checkpoints on the device";
  if (tier == "host") where = "layer checkpoints in host memory";
  if (tier == "disk") where = "layer checkpoints on local disk";
  if (p.optimizer_offload()) where += "; optimizer state in host memory";
  t.AddRow({"memory tier:", absl::StrCat(tier, " (", where, ")")});
  t.AddRow({"host tier:", absl::StrCat(Bytes(p.host_tier_bytes()), " (peak ",
                                       Bytes(p.host_tier_peak_bytes()), ")")});
  if (tier == "disk" || p.disk_tier_bytes() > 0) {
    t.AddRow({"disk tier:", Bytes(p.disk_tier_bytes())});
  }
  const double rate = p.offload_copy_bytes_per_second();
  const std::string copies =
      rate > 0 ? absl::StrCat(FormatByteSize(static_cast<int64_t>(rate)), "/s") : "none";
  t.AddRow({"offload copies:", absl::StrFormat("%s, compute waited %.3f s (last step)", copies,
                                               p.offload_wait_seconds())});
}

// Online GRPO's sampling in the last step, for jobs that sample online: the
// rewards, the completions' lengths and how many hit max_new_tokens, the
// sampling rate, and how the step's time split between rollout and training.
void AddRolloutRows(const v1::JobProgress& p, Table& t) {
  if (!p.has_rollout()) return;
  const v1::RolloutProgress& r = p.rollout();
  t.AddRow({"reward:",
            absl::StrFormat("%.4f mean, %.4f std (last step)", r.reward_mean(), r.reward_std())});
  t.AddRow({"completions:",
            absl::StrFormat("%.1f tokens mean, %d max; %.1f%% truncated at max_new_tokens",
                            r.completion_length_mean(), r.completion_length_max(),
                            r.truncated_fraction() * 100)});
  t.AddRow({"rollout:", absl::StrFormat("%.0f tok/s; %.3f s rollout, %.3f s training (last step)",
                                        r.rollout_tokens_per_second(), r.rollout_seconds(),
                                        r.train_seconds())});
}

}  // namespace

std::string StateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  absl::string_view view = name;
  if (absl::ConsumePrefix(&view, "JOB_STATE_")) return std::string(view);
  return name;
}

absl::StatusOr<v1::JobState> ParseState(const std::string& text) {
  std::string upper = absl::AsciiStrToUpper(text);
  if (!absl::StartsWith(upper, "JOB_STATE_")) upper = "JOB_STATE_" + upper;
  v1::JobState state;
  if (!v1::JobState_Parse(upper, &state) || state == v1::JOB_STATE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state: unknown job state '", text,
                     "' (pending, scheduled, running, succeeded, failed, cancelled, retrying)"));
  }
  return state;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  const nlohmann::json json = ProtoToJson(message);
  return pretty ? json.dump(2) : json.dump() + "\n";
}

std::string Age(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  const int64_t seconds = std::max<int64_t>(0, absl::ToUnixSeconds(absl::Now()) - t.seconds());
  if (seconds < 120) return absl::StrCat(seconds, "s");
  if (seconds < 2 * 3600) return absl::StrCat(seconds / 60, "m");
  if (seconds < 2 * 86400) return absl::StrCat(seconds / 3600, "h");
  return absl::StrCat(seconds / 86400, "d");
}

std::string JobsTable(const v1::ListJobsResponse& jobs) {
  Table table({"ID", "NAME", "STATE", "ATTEMPT", "STEP", "LOSS", "PEAK", "AGE", "REASON"});
  for (const v1::Job& job : jobs.jobs()) {
    table.AddRow({job.id(), job.name(), StateName(job.state()), absl::StrCat(job.attempt()),
                  StepText(job.progress()), LossText(job.progress()),
                  Bytes(job.progress().peak_bytes()), Age(job.created_at()), job.reason()});
  }
  return table.Render();
}

std::string JobSpecs(const v1::ListJobsResponse& jobs) {
  std::string out;
  for (const v1::Job& job : jobs.jobs()) {
    absl::StrAppend(&out, "\n# ", job.id(), " (", job.name(), ")\n", job.spec_yaml());
    if (!job.spec_yaml().empty() && job.spec_yaml().back() != '\n') out += '\n';
  }
  return out;
}

std::string WorkersTable(const v1::ListWorkersResponse& workers) {
  // Offload disk only when some worker offers it to the disk tier.
  bool any_disk = false;
  for (const v1::Worker& w : workers.workers()) any_disk = any_disk || w.offload_disk_bytes() > 0;
  std::vector<std::string> header = {"ID", "NAME", "DEVICE", "MEMORY", "HOST MEMORY"};
  if (any_disk) header.push_back("OFFLOAD DISK");
  for (const char* column : {"STATE", "JOB", "PEAK", "HEARTBEAT", "VERSION"}) {
    header.push_back(column);
  }
  Table table(header);
  for (const v1::Worker& w : workers.workers()) {
    std::vector<std::string> row = {w.id(), w.name(), std::string(ProtoDeviceKindName(w.device())),
                                    Bytes(w.memory_bytes()), Bytes(w.host_memory_bytes())};
    if (any_disk) row.push_back(Bytes(w.offload_disk_bytes()));
    for (std::string cell : {w.state(), w.job_id().empty() ? std::string("-") : w.job_id(),
                             Bytes(w.memory().peak_bytes()),
                             Age(w.last_heartbeat()) + (w.has_last_heartbeat() ? " ago" : ""),
                             w.version().empty() ? std::string("-") : w.version()}) {
      row.push_back(std::move(cell));
    }
    table.AddRow(row);
  }
  return table.Render();
}

std::string JobDetails(const v1::Job& job) {
  const v1::JobProgress& p = job.progress();
  Table t({"id:", job.id()});
  t.AddRow({"name:", job.name()});
  t.AddRow({"state:", StateName(job.state())});
  t.AddRow({"reason:", job.reason()});
  t.AddRow({"attempt:", absl::StrCat(job.attempt(), " (max restarts ", job.max_restarts(),
                                     job.preemptions() > 0
                                         ? absl::StrCat("; preempted ", job.preemptions(),
                                                        job.preemptions() == 1 ? " time" : " times")
                                         : std::string(),
                                     ")")});
  t.AddRow({"workers:", job.worker_ids().empty()
                            ? std::string("-")
                            : absl::StrCat(absl::StrJoin(job.worker_ids(), ", "), " (world size ",
                                           job.world_size(), ")")});
  std::string memory = Bytes(job.required_memory_bytes());
  if (job.required_host_memory_bytes() > 0) {
    absl::StrAppend(&memory, ", ", FormatByteSize(job.required_host_memory_bytes()),
                    " host memory");
  }
  if (job.required_offload_disk_bytes() > 0) {
    absl::StrAppend(&memory, ", ", FormatByteSize(job.required_offload_disk_bytes()),
                    " offload disk");
  }
  t.AddRow({"memory:", absl::StrCat(memory, " per worker")});
  t.AddRow({"priority:", absl::StrCat(job.priority())});
  t.AddRow({"step:", StepText(p)});
  if (p.step() > 0) {
    t.AddRow({"loss:", LossText(p)});
    if (p.eval_step() > 0) {
      t.AddRow(
          {"eval loss:", absl::StrFormat("%.4f (after step %d)", p.eval_loss(), p.eval_step())});
    }
    t.AddRow({"learning rate:", absl::StrFormat("%.3g", p.learning_rate())});
    t.AddRow({"throughput:",
              absl::StrFormat("%.0f tok/s (%d tokens)", p.tokens_per_second(), p.tokens_total())});
    t.AddRow({"mfu:", absl::StrFormat("%.2f%%", p.mfu() * 100)});
    t.AddRow({"peak memory:", Bytes(p.peak_bytes())});
    AddTierRows(p, t);
    AddRolloutRows(p, t);
    if (!IsTerminal(job.state())) t.AddRow({"eta:", FormatDuration(p.eta_seconds())});
  }
  if (job.failure_class() != v1::FAILURE_CLASS_UNSPECIFIED) {
    t.AddRow({"failure:", v1::FailureClass_Name(job.failure_class())});
  }
  t.AddRow({"run:", job.run_dir().empty() ? "-" : job.run_dir()});
  t.AddRow(
      {"checkpoint:", absl::StrCat(job.last_checkpoint().empty() ? "-" : job.last_checkpoint(),
                                   job.stopping() ? " (the workers are still stopping)" : "")});
  t.AddRow({"created:", TimeText(job.created_at())});
  t.AddRow({"started:", TimeText(job.started_at())});
  t.AddRow({"finished:", TimeText(job.finished_at())});
  return t.Render();
}

std::string EventsTable(const v1::JobEventsResponse& events) {
  Table table({"SEQ", "TIME", "ATTEMPT", "STATE", "REASON"});
  for (const v1::JobEvent& e : events.events()) {
    const absl::Time time = absl::FromUnixSeconds(e.time().seconds());
    table.AddRow({absl::StrCat(e.sequence()),
                  absl::FormatTime("%Y-%m-%d %H:%M:%S", time, absl::UTCTimeZone()),
                  absl::StrCat(e.attempt()),
                  e.to_state() == e.from_state() || e.to_state() == v1::JOB_STATE_UNSPECIFIED
                      ? "-"
                      : StateName(e.to_state()),
                  e.reason().empty() ? e.message() : e.reason()});
  }
  return table.Render();
}

}  // namespace sbp::cli
