#include "server/worker_service.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "proto/device_kind.h"
#include "server/proto_convert.h"

namespace sbp::server {
namespace {

namespace v1 = streambp::v1;

constexpr char kRegister[] = "streambp.v1.WorkerService/Register";
constexpr char kHeartbeat[] = "streambp.v1.WorkerService/Heartbeat";
constexpr char kGetAssignment[] = "streambp.v1.WorkerService/GetAssignment";
constexpr char kReportProgress[] = "streambp.v1.WorkerService/ReportProgress";
constexpr char kFinish[] = "streambp.v1.WorkerService/Finish";
constexpr char kAppendOutput[] = "streambp.v1.WorkerService/AppendOutput";

absl::Status Required(const std::string& value, absl::string_view field) {
  if (!value.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": is required"));
}

absl::Status CheckRank(int rank) {
  if (rank >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("rank: must not be negative (got ", rank, ")"));
}

// The attempt a worker reports it is training, if it reports one.
std::optional<AttemptKey> RunningAttempt(bool present, const v1::AttemptRef& ref) {
  if (!present || ref.job_id().empty()) return std::nullopt;
  return AttemptKey{ref.job_id(), ref.attempt()};
}

}  // namespace

grpc::Status WorkerServiceImpl::Register(grpc::ServerContext* context,
                                         const v1::RegisterWorkerRequest* request,
                                         v1::RegisterWorkerResponse* response) {
  return guard_->Run(
      *context, Role::kWorker, kRegister, [&](const Identity& caller) -> absl::Status {
        RegisterRequest r;
        absl::StatusOr<DeviceKind> device = DeviceKindFromProto(request->device(), "device");
        if (!device.ok()) return device.status();
        r.device = *device;
        r.worker_id = request->worker_id();
        r.name = request->name();
        r.memory_bytes = request->memory_bytes();
        r.host_memory_bytes = request->host_memory_bytes();
        r.offload_disk_bytes = request->offload_disk_bytes();
        r.version = request->version();
        r.running = RunningAttempt(request->has_running(), request->running());
        r.identity = caller.name;
        absl::StatusOr<Registration> registration = manager_->Register(r);
        if (!registration.ok()) return registration.status();
        response->set_worker_id(registration->worker_id);
        response->set_lease_seconds(registration->lease_seconds);
        response->set_heartbeat_seconds(registration->heartbeat_seconds);
        return absl::OkStatus();
      });
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* context,
                                          const v1::HeartbeatRequest* request,
                                          v1::HeartbeatResponse* response) {
  return guard_->Run(
      *context, Role::kWorker, kHeartbeat, [&](const Identity& caller) -> absl::Status {
        RETURN_IF_ERROR(manager_->CheckWorkerIdentity(request->worker_id(), caller));
        absl::StatusOr<HeartbeatResult> result = manager_->Heartbeat(
            request->worker_id(), RunningAttempt(request->has_running(), request->running()),
            FromProto(request->memory()));
        if (!result.ok()) return result.status();
        response->set_registered(result->registered);
        response->set_lease_seconds(result->lease_seconds);
        response->set_heartbeat_seconds(result->heartbeat_seconds);
        for (const AttemptKey& stop : result->stop_attempts) {
          v1::AttemptRef* ref = response->add_stop_attempts();
          ref->set_job_id(stop.job_id);
          ref->set_attempt(stop.attempt);
        }
        for (const AttemptKey& preempted : result->checkpoint_attempts) {
          v1::AttemptRef* ref = response->add_checkpoint_attempts();
          ref->set_job_id(preempted.job_id);
          ref->set_attempt(preempted.attempt);
        }
        return absl::OkStatus();
      });
}

grpc::Status WorkerServiceImpl::GetAssignment(grpc::ServerContext* context,
                                              const v1::GetAssignmentRequest* request,
                                              v1::GetAssignmentResponse* response) {
  return guard_->Run(
      *context, Role::kWorker, kGetAssignment, [&](const Identity& caller) -> absl::Status {
        RETURN_IF_ERROR(manager_->CheckWorkerIdentity(request->worker_id(), caller));
        if (request->wait_seconds() < 0) {
          return absl::InvalidArgumentError(absl::StrCat("wait_seconds: must not be negative (got ",
                                                         request->wait_seconds(), ")"));
        }
        absl::StatusOr<std::optional<AssignmentView>> assignment =
            manager_->GetAssignment(request->worker_id(), absl::Seconds(request->wait_seconds()),
                                    [context] { return context->IsCancelled(); });
        if (!assignment.ok()) return assignment.status();
        if (assignment->has_value()) ToProto(**assignment, response->mutable_assignment());
        return absl::OkStatus();
      });
}

grpc::Status WorkerServiceImpl::ReportProgress(grpc::ServerContext* context,
                                               const v1::ReportProgressRequest* request,
                                               v1::ReportProgressResponse* response) {
  return guard_->Run(*context, Role::kWorker, kReportProgress,
                     [&](const Identity& caller) -> absl::Status {
                       RETURN_IF_ERROR(manager_->CheckWorkerIdentity(request->worker_id(), caller));
                       if (absl::Status s = Required(request->worker_id(), "worker_id"); !s.ok())
                         return s;
                       if (absl::Status s = CheckRank(request->rank()); !s.ok()) return s;
                       ProgressReport report;
                       report.worker_id = request->worker_id();
                       report.job_id = request->job_id();
                       report.attempt = request->attempt();
                       report.rank = request->rank();
                       report.progress = FromProto(request->progress());
                       report.checkpoint = request->checkpoint();
                       report.message = request->message();
                       absl::StatusOr<ProgressAnswer> answer = manager_->ReportProgress(report);
                       if (!answer.ok()) return answer.status();
                       response->set_cancel_requested(answer->cancel_requested);
                       response->set_checkpoint_and_stop(answer->checkpoint_and_stop);
                       return absl::OkStatus();
                     });
}

grpc::Status WorkerServiceImpl::Finish(grpc::ServerContext* context,
                                       const v1::FinishRequest* request,
                                       v1::FinishResponse* response) {
  return guard_->Run(*context, Role::kWorker, kFinish, [&](const Identity& caller) -> absl::Status {
    RETURN_IF_ERROR(manager_->CheckWorkerIdentity(request->worker_id(), caller));
    if (absl::Status s = Required(request->worker_id(), "worker_id"); !s.ok()) return s;
    if (absl::Status s = CheckRank(request->rank()); !s.ok()) return s;
    FinishReport report;
    report.worker_id = request->worker_id();
    report.job_id = request->job_id();
    report.attempt = request->attempt();
    report.rank = request->rank();
    report.outcome = FromProto(request->outcome());
    report.failure_class = FromProto(request->failure_class());
    report.message = request->message();
    return manager_->Finish(report);
  });
}

grpc::Status WorkerServiceImpl::AppendOutput(grpc::ServerContext* context,
                                             const v1::AppendOutputRequest* request,
                                             v1::AppendOutputResponse* response) {
  return guard_->Run(
      *context, Role::kWorker, kAppendOutput, [&](const Identity& caller) -> absl::Status {
        RETURN_IF_ERROR(manager_->CheckWorkerIdentity(request->worker_id(), caller));
        if (absl::Status s = Required(request->worker_id(), "worker_id"); !s.ok()) return s;
        OutputReport report;
        report.worker_id = request->worker_id();
        report.job_id = request->job_id();
        report.attempt = request->attempt();
        report.rank = request->rank();
        report.metrics_first = request->metrics_first();
        report.metrics_lines.assign(request->metrics_lines().begin(),
                                    request->metrics_lines().end());
        report.logs_first = request->logs_first();
        report.log_lines.assign(request->log_lines().begin(), request->log_lines().end());
        return manager_->AppendOutput(report);
      });
}

}  // namespace sbp::server
