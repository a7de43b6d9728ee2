#include "server/proto_convert.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/timestamp.pb.h"
#include "nlohmann/json.hpp"
#include "proto/device_kind.h"

namespace sbp::server {
namespace {

namespace v1 = streambp::v1;

void SetTime(absl::Time t, google::protobuf::Timestamp* out) {
  const int64_t us = absl::ToUnixMicros(t);
  out->set_seconds(us / 1000000);
  out->set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
}

absl::Time GetTime(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

// The run directory the spec names (checkpoint.dir, else runs/<id>); "" when
// the record was read without its spec (a list without specs).
std::string RunDirOf(const JobRecord& job) {
  if (job.spec_json.empty()) return "";
  const nlohmann::json spec = nlohmann::json::parse(job.spec_json, nullptr, false);
  if (spec.is_object()) {
    const auto checkpoint = spec.find("checkpoint");
    if (checkpoint != spec.end() && checkpoint->is_object()) {
      const auto dir = checkpoint->find("dir");
      if (dir != checkpoint->end() && dir->is_string() && !dir->get<std::string>().empty()) {
        return dir->get<std::string>();
      }
    }
  }
  return absl::StrCat("runs/", job.id);
}

}  // namespace

void ToProto(const JobRecord& job, v1::Job* out) {
  out->set_run_dir(RunDirOf(job));
  out->set_stopping(job.stopping);
  out->set_owner(job.owner);
  out->set_preemptions(job.preemptions);
  out->set_id(job.id);
  out->set_name(job.name);
  out->set_spec_yaml(job.spec_yaml);
  out->set_state(static_cast<v1::JobState>(job.state));
  out->set_reason(job.reason);
  out->set_attempt(job.attempt);
  out->set_max_restarts(job.max_restarts);
  out->set_priority(job.priority);
  out->set_world_size(job.world_size);
  out->clear_worker_ids();
  for (const std::string& w : job.worker_ids) out->add_worker_ids(w);
  v1::JobProgress* p = out->mutable_progress();
  p->set_step(job.progress.step);
  p->set_total_steps(job.progress.total_steps);
  p->set_loss(job.progress.loss);
  p->set_learning_rate(job.progress.learning_rate);
  p->set_grad_norm(job.progress.grad_norm);
  p->set_tokens_per_second(job.progress.tokens_per_second);
  p->set_tokens_total(job.progress.tokens_total);
  p->set_mfu(job.progress.mfu);
  p->set_peak_bytes(job.progress.peak_bytes);
  p->set_current_bytes(job.progress.current_bytes);
  p->set_step_seconds(job.progress.step_seconds);
  p->set_eta_seconds(job.progress.eta_seconds);
  p->set_eval_loss(job.progress.eval_loss);
  p->set_eval_step(job.progress.eval_step);
  p->set_checkpoint_tier(job.progress.checkpoint_tier);
  p->set_optimizer_offload(job.progress.optimizer_offload);
  p->set_host_tier_bytes(job.progress.host_tier_bytes);
  p->set_host_tier_peak_bytes(job.progress.host_tier_peak_bytes);
  p->set_disk_tier_bytes(job.progress.disk_tier_bytes);
  p->set_offload_copy_bytes_per_second(job.progress.offload_copy_bytes_per_second);
  p->set_offload_wait_seconds(job.progress.offload_wait_seconds);
  if (job.progress.rollout.has_value()) {
    const RolloutProgressRecord& r = *job.progress.rollout;
    v1::RolloutProgress* rollout = p->mutable_rollout();
    rollout->set_reward_mean(r.reward_mean);
    rollout->set_reward_std(r.reward_std);
    rollout->set_completion_length_mean(r.completion_length_mean);
    rollout->set_completion_length_max(r.completion_length_max);
    rollout->set_truncated_fraction(r.truncated_fraction);
    rollout->set_rollout_tokens_per_second(r.rollout_tokens_per_second);
    rollout->set_rollout_seconds(r.rollout_seconds);
    rollout->set_train_seconds(r.train_seconds);
  } else {
    p->clear_rollout();
  }
  if (job.progress.updated_at != absl::UnixEpoch()) {
    SetTime(job.progress.updated_at, p->mutable_updated_at());
  }
  out->set_failure_class(static_cast<v1::FailureClass>(job.failure_class));
  out->set_last_checkpoint(job.last_checkpoint);
  out->set_required_memory_bytes(job.required_memory_bytes);
  out->set_required_host_memory_bytes(job.required_host_memory_bytes);
  out->set_required_offload_disk_bytes(job.required_offload_disk_bytes);
  out->set_request_id(job.request_id);
  out->set_revision(job.revision);
  if (job.created_at != absl::UnixEpoch()) SetTime(job.created_at, out->mutable_created_at());
  if (job.updated_at != absl::UnixEpoch()) SetTime(job.updated_at, out->mutable_updated_at());
  if (job.started_at != absl::UnixEpoch()) SetTime(job.started_at, out->mutable_started_at());
  if (job.finished_at != absl::UnixEpoch()) SetTime(job.finished_at, out->mutable_finished_at());
}

void ToProto(const JobEventRecord& event, v1::JobEvent* out) {
  out->set_sequence(event.sequence);
  SetTime(event.time, out->mutable_time());
  out->set_from_state(static_cast<v1::JobState>(event.from_state));
  out->set_to_state(static_cast<v1::JobState>(event.to_state));
  out->set_attempt(event.attempt);
  out->set_reason(event.reason);
  out->set_message(event.message);
}

void ToProto(const WorkerView& worker, v1::Worker* out) {
  out->set_id(worker.record.id);
  out->set_name(worker.record.name);
  out->set_device(DeviceKindToProto(worker.record.device));
  out->set_memory_bytes(worker.record.memory_bytes);
  out->set_host_memory_bytes(worker.record.host_memory_bytes);
  out->set_offload_disk_bytes(worker.record.offload_disk_bytes);
  out->set_state(std::string(WorkerStateName(worker.state)));
  out->set_job_id(worker.job_id);
  out->mutable_memory()->set_current_bytes(worker.memory.current_bytes);
  out->mutable_memory()->set_peak_bytes(worker.memory.peak_bytes);
  out->mutable_memory()->set_capacity_bytes(worker.memory.capacity_bytes);
  if (worker.last_heartbeat != absl::UnixEpoch()) {
    SetTime(worker.last_heartbeat, out->mutable_last_heartbeat());
  }
  out->set_version(worker.record.version);
}

void ToProto(const AssignmentView& assignment, v1::Assignment* out) {
  out->set_job_id(assignment.job_id);
  out->set_attempt(assignment.attempt);
  out->set_rank(assignment.rank);
  out->set_world_size(assignment.world_size);
  out->set_spec_yaml(assignment.spec_yaml);
  out->set_rendezvous_scope(assignment.rendezvous_scope);
  out->set_run_area(assignment.run_area);
}

ProgressRecord FromProto(const v1::JobProgress& p) {
  ProgressRecord r;
  r.step = p.step();
  r.total_steps = p.total_steps();
  r.loss = p.loss();
  r.learning_rate = p.learning_rate();
  r.grad_norm = p.grad_norm();
  r.tokens_per_second = p.tokens_per_second();
  r.tokens_total = p.tokens_total();
  r.mfu = p.mfu();
  r.peak_bytes = p.peak_bytes();
  r.current_bytes = p.current_bytes();
  r.step_seconds = p.step_seconds();
  r.eta_seconds = p.eta_seconds();
  r.eval_loss = p.eval_loss();
  r.eval_step = p.eval_step();
  r.checkpoint_tier = p.checkpoint_tier();
  r.optimizer_offload = p.optimizer_offload();
  r.host_tier_bytes = p.host_tier_bytes();
  r.host_tier_peak_bytes = p.host_tier_peak_bytes();
  r.disk_tier_bytes = p.disk_tier_bytes();
  r.offload_copy_bytes_per_second = p.offload_copy_bytes_per_second();
  r.offload_wait_seconds = p.offload_wait_seconds();
  if (p.has_rollout()) {
    const v1::RolloutProgress& rollout = p.rollout();
    r.rollout = RolloutProgressRecord{rollout.reward_mean(),
                                      rollout.reward_std(),
                                      rollout.completion_length_mean(),
                                      rollout.completion_length_max(),
                                      rollout.truncated_fraction(),
                                      rollout.rollout_tokens_per_second(),
                                      rollout.rollout_seconds(),
                                      rollout.train_seconds()};
  }
  if (p.has_updated_at()) r.updated_at = GetTime(p.updated_at());
  return r;
}

MemoryUsageRecord FromProto(const v1::MemoryUsage& m) {
  return MemoryUsageRecord{m.current_bytes(), m.peak_bytes(), m.capacity_bytes()};
}

JobState FromProto(v1::JobState state) {
  const int value = static_cast<int>(state);
  return value >= 1 && value <= 7 ? static_cast<JobState>(value) : JobState::kUnspecified;
}

FailureClass FromProto(v1::FailureClass failure) {
  const int value = static_cast<int>(failure);
  return value >= 1 && value <= 7 ? static_cast<FailureClass>(value) : FailureClass::kUnspecified;
}

Outcome FromProto(v1::Outcome outcome) {
  const int value = static_cast<int>(outcome);
  return value >= 1 && value <= 4 ? static_cast<Outcome>(value) : Outcome::kUnspecified;
}

}  // namespace sbp::server
