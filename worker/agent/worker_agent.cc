#include "worker/agent/worker_agent.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/failure_kind.h"
#include "common/file_confinement.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/version.h"
#include "google/protobuf/util/time_util.h"
#include "proto/device_kind.h"
#include "worker/agent/backoff.h"
#include "worker/agent/coordinator_channel.h"
#include "worker/agent/failure.h"
#include "worker/agent/progress_convert.h"
#include "worker/agent/progress_reporter.h"
#include "worker/agent/rendezvous_store.h"
#include "worker/agent/system_info.h"
#include "worker/dist/connect.h"
#include "worker/train/job_paths.h"
#include "worker/train/job_spec.h"
#include "worker/train/trainer.h"

namespace sbp {
namespace {

namespace v1 = streambp::v1;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kCallTimeout{10000};
constexpr int kPollWaitSeconds = 10;

// Errors that another try cannot fix.
bool IsPermanent(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kInvalidArgument:
      return true;
    default:
      return false;
  }
}

bool IsTransient(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

}  // namespace

// Feeds one run's steps and checkpoints to the reporter and the metrics, and
// tells the trainer when to stop.
class WorkerAgent::Observer final : public TrainingObserver {
 public:
  Observer(WorkerAgent* agent, const v1::Assignment& assignment, ProgressReporter* reporter)
      : agent_(agent), assignment_(assignment), reporter_(reporter) {}

  void OnStart(const JobSpec& spec, const RunStart& start) override {
    const int64_t resumed_step = start.resumed_step;
    start_ = Clock::now();
    first_step_ = resumed_step + 1;
    std::string message = absl::StrCat("attempt ", assignment_.attempt(), " started on worker ",
                                       agent_->options_.name, ", run ", start.run_dir);
    if (!start.resumed_from.empty()) {
      absl::StrAppend(&message, ", starting from ", start.resumed_from, " (resume_from, step ",
                      resumed_step, ")");
    } else if (resumed_step > 0) {
      absl::StrAppend(&message, ", resuming after step ", resumed_step);
    }
    if (start.capacity_bytes > 0) {
      absl::StrAppend(&message, ", memory budget ", FormatByteSize(start.capacity_bytes));
    }
    reporter_->PostMessage(message);
    // The job's log (sbp logs) starts with it, and has a line every
    // log_every_steps steps.
    LOG(INFO) << "job " << assignment_.job_id() << ": " << message;
    log_every_steps_ = std::max<int64_t>(1, spec.log_every_steps);
    if (resumed_step > 0) {  // where the run stands before its first step
      v1::JobProgress progress;
      progress.set_step(resumed_step);
      progress.set_total_steps(spec.train.steps);
      progress.set_eta_seconds(-1);
      *progress.mutable_updated_at() = google::protobuf::util::TimeUtil::GetCurrentTime();
      reporter_->PostProgress(progress);
    }
  }

  void OnStep(const StepReport& report) override {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    v1::JobProgress progress = ToJobProgress(
        report, EstimateEtaSeconds(report.step, report.total_steps, first_step_, elapsed));
    *progress.mutable_updated_at() = google::protobuf::util::TimeUtil::GetCurrentTime();
    reporter_->PostProgress(progress);
    agent_->metrics_->OnStep(assignment_.job_id(), report);
    // Rank 0's metrics.jsonl line, as the trainer just wrote it.
    if (agent_->output_ != nullptr && assignment_.rank() == 0) {
      agent_->output_->PostMetrics(report.ToJson().dump());
    }
    if (assignment_.rank() == 0 &&
        (report.step % log_every_steps_ == 0 || report.step == report.total_steps)) {
      LOG(INFO) << "job " << assignment_.job_id() << ": step " << report.step << "/"
                << report.total_steps << " loss " << report.loss << " lr " << report.lr
                << " tokens/s " << static_cast<int64_t>(report.tokens_per_second) << " peak "
                << FormatByteSize(report.peak_bytes);
    }
    agent_->current_bytes_ = report.current_bytes;
    agent_->peak_bytes_ = report.peak_bytes;
  }

  void OnCheckpoint(int64_t step, const std::string& path) override {
    reporter_->PostCheckpoint(path);
    if (assignment_.rank() == 0) {
      LOG(INFO) << "job " << assignment_.job_id() << ": checkpoint " << path << " at step " << step;
    }
  }

  bool StopRequested() override {
    return agent_->stopping() || reporter_->cancel_requested() || reporter_->aborted() ||
           agent_->RunningAttemptStopped() || agent_->CheckpointRequested();
  }

  // Cancelled, or over at the coordinator (a heartbeat's stop_attempts):
  // the step in progress is abandoned. Not a preemption or a shutdown, which
  // finish the step and checkpoint it.
  bool AbandonRequested() override {
    return reporter_->cancel_requested() || reporter_->aborted() || agent_->RunningAttemptStopped();
  }

  absl::Status CheckLease() override { return agent_->CheckLease(assignment_); }

 private:
  WorkerAgent* agent_;
  const v1::Assignment& assignment_;
  ProgressReporter* reporter_;
  Clock::time_point start_ = Clock::now();
  int64_t first_step_ = 1;
  int64_t log_every_steps_ = 1;
};

WorkerAgent::WorkerAgent(AgentOptions options) : options_(std::move(options)) {}

WorkerAgent::~WorkerAgent() {
  Stop();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

absl::StatusOr<std::unique_ptr<WorkerAgent>> WorkerAgent::Create(AgentOptions options) {
  if (options.coordinator.empty()) {
    return absl::InvalidArgumentError("--coordinator: no coordinator address given");
  }
  if (options.memory_bytes <= 0) {
    return absl::InvalidArgumentError("--memory: must be a positive byte size");
  }
  if (options.host_memory_bytes < 0) {
    return absl::InvalidArgumentError("--host-memory: must not be negative");
  }
  if (options.offload_disk_bytes < 0) {
    return absl::InvalidArgumentError("--offload-disk: must not be negative");
  }
  if (!options.device.is_cpu() && !kCudaCompiled) {
    return absl::InvalidArgumentError("--device: this build has no CUDA backend");
  }
  if (options.name.empty()) options.name = DefaultWorkerName();
  if (options.work_dir.empty()) options.work_dir.push_back('.');
  std::unique_ptr<WorkerAgent> agent(new WorkerAgent(std::move(options)));
  const AgentOptions& o = agent->options_;
  auto channel = CreateCoordinatorChannel({o.coordinator, o.token, o.tls_ca_path});
  if (!channel.ok()) return channel.status();
  agent->channel_ = *channel;
  agent->stub_ = v1::WorkerService::NewStub(agent->channel_);
  auto metrics = WorkerMetrics::Create(o.metrics_listen, o.memory_bytes);
  if (!metrics.ok()) return metrics.status();
  agent->metrics_ = *std::move(metrics);
  return agent;
}

std::string WorkerAgent::worker_id() const {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

void WorkerAgent::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  if (poll_context_ != nullptr) poll_context_->TryCancel();
}

bool WorkerAgent::RunningAttemptStopped() const {
  absl::MutexLock lock(&mu_);
  return running_stopped_;
}

bool WorkerAgent::CheckpointRequested() const {
  absl::MutexLock lock(&mu_);
  return running_checkpoint_;
}

void WorkerAgent::RequestCheckpoint(const std::string& job_id, int attempt) {
  absl::MutexLock lock(&mu_);
  if (job_id != running_job_ || attempt != running_attempt_ || running_checkpoint_) return;
  LOG(INFO) << "job " << job_id << " attempt " << attempt
            << " was preempted; it checkpoints at its next step boundary and stops";
  running_checkpoint_ = true;
}

absl::Status WorkerAgent::CheckLease(const v1::Assignment& assignment) const {
  const auto start = Clock::now();
  while (true) {
    std::chrono::steady_clock::duration held;
    int lease_seconds;
    {
      absl::MutexLock lock(&mu_);
      lease_seconds = lease_seconds_;
      const auto lease = std::chrono::milliseconds(lease_seconds_ * 1000);
      held = Clock::now() - lease_renewed_at_;
      if (running_stopped_ || lease_lost_) {
        return WithFailureKind(
            absl::AbortedError(absl::StrCat(
                "job ", assignment.job_id(), " attempt ", assignment.attempt(),
                running_stopped_ ? ": the coordinator ended it"
                                 : ": the coordinator declared this worker lost (its lease "
                                   "expired); stopping without writing")),
            FailureKind::kStaleAttempt);
      }
      if (held <= lease - lease / 4) return absl::OkStatus();
    }
    // Unrenewed: nothing may be written. A coordinator that restarts still
    // knows this worker and renews it; one that declared it lost says so
    // (lease_lost_); one that stays away ends the attempt here.
    const auto waited = Clock::now() - start;
    if (stopping() || waited > std::chrono::seconds(std::max(60, 10 * lease_seconds))) {
      return WithFailureKind(absl::AbortedError(absl::StrCat(
                                 "job ", assignment.job_id(), " attempt ", assignment.attempt(),
                                 ": no heartbeat renewed this worker's lease for ",
                                 std::chrono::duration_cast<std::chrono::seconds>(held).count(),
                                 " s (lease ", lease_seconds, " s); stopping without writing")),
                             FailureKind::kStaleAttempt);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void WorkerAgent::SleepFor(milliseconds duration) {
  absl::MutexLock lock(&mu_);
  auto stopping = [this] { return stopping_.load(); };
  mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::FromChrono(duration));
}

absl::Status WorkerAgent::EnsureRegistered() {
  absl::MutexLock register_lock(&register_mu_);
  v1::RegisterWorkerRequest request;
  {
    absl::MutexLock lock(&mu_);
    if (registered_) return absl::OkStatus();
    request.set_worker_id(worker_id_);
  }
  request.set_name(options_.name);
  request.set_device(DeviceKindToProto(options_.device.kind));
  request.set_memory_bytes(options_.memory_bytes);
  request.set_host_memory_bytes(options_.host_memory_bytes);
  request.set_offload_disk_bytes(options_.offload_disk_bytes);
  request.set_version(kVersion);
  {
    absl::MutexLock lock(&mu_);
    if (!running_job_.empty()) {
      request.mutable_running()->set_job_id(running_job_);
      request.mutable_running()->set_attempt(running_attempt_);
    }
  }
  grpc::ClientContext context;
  PrepareContext(context, options_.token, kCallTimeout);
  v1::RegisterWorkerResponse response;
  const auto sent = Clock::now();
  absl::Status status = FromGrpcStatus(stub_->Register(&context, request, &response));
  if (!status.ok()) return status;
  absl::MutexLock lock(&mu_);
  // A registration starts a lease, but never revives the lease of an attempt
  // already running: only a heartbeat that does not stop it renews that.
  if (running_job_.empty()) lease_renewed_at_ = sent;
  if (!worker_id_.empty() && worker_id_ != response.worker_id()) {
    LOG(WARNING) << "coordinator gave a new worker id " << response.worker_id() << " (was "
                 << worker_id_ << ")";
  }
  LOG(INFO) << (worker_id_.empty() ? "registered" : "re-registered") << " with "
            << options_.coordinator << " as " << response.worker_id() << " (" << options_.name
            << ", " << FormatByteSize(options_.memory_bytes) << ")";
  worker_id_ = response.worker_id();
  registered_ = true;
  if (response.heartbeat_seconds() > 0) heartbeat_seconds_ = response.heartbeat_seconds();
  if (response.lease_seconds() > 0) lease_seconds_ = response.lease_seconds();
  return absl::OkStatus();
}

void WorkerAgent::HeartbeatLoop() {
  bool healthy = true;
  while (!stopping()) {
    int interval_seconds;
    v1::HeartbeatRequest request;
    {
      absl::MutexLock lock(&mu_);
      interval_seconds = heartbeat_seconds_;
      request.set_worker_id(worker_id_);
    }
    SleepFor(healthy ? milliseconds(interval_seconds * 1000) : milliseconds(1000));
    if (stopping()) break;
    absl::Status status = EnsureRegistered();
    if (status.ok()) {
      {
        absl::MutexLock lock(&mu_);
        request.set_worker_id(worker_id_);
      }
      request.mutable_memory()->set_current_bytes(current_bytes_);
      request.mutable_memory()->set_peak_bytes(peak_bytes_);
      request.mutable_memory()->set_capacity_bytes(options_.memory_bytes);
      {
        absl::MutexLock lock(&mu_);
        if (!running_job_.empty()) {
          request.mutable_running()->set_job_id(running_job_);
          request.mutable_running()->set_attempt(running_attempt_);
        }
      }
      grpc::ClientContext context;
      PrepareContext(context, options_.token, kCallTimeout);
      v1::HeartbeatResponse response;
      const auto sent = Clock::now();
      status = FromGrpcStatus(stub_->Heartbeat(&context, request, &response));
      if (status.ok()) {
        for (const v1::AttemptRef& ref : response.checkpoint_attempts()) {
          RequestCheckpoint(ref.job_id(), ref.attempt());
        }
        absl::MutexLock lock(&mu_);
        for (const v1::AttemptRef& ref : response.stop_attempts()) {
          if (ref.job_id() == running_job_ && ref.attempt() == running_attempt_ &&
              !running_stopped_) {
            LOG(WARNING) << "the coordinator ended job " << ref.job_id() << " attempt "
                         << ref.attempt() << "; stopping it";
            running_stopped_ = true;
          }
        }
        // The lease in force comes with every answer: adopted at once (a
        // coordinator restarted with a shorter --lease-seconds must see this
        // worker stop writing within the new lease).
        if (response.lease_seconds() > 0 && response.lease_seconds() != lease_seconds_) {
          LOG(INFO) << "the coordinator's lease is now " << response.lease_seconds() << " s (was "
                    << lease_seconds_ << " s)";
          lease_seconds_ = response.lease_seconds();
        }
        if (response.heartbeat_seconds() > 0) heartbeat_seconds_ = response.heartbeat_seconds();
        // The lease is renewed only by a heartbeat the coordinator took for a
        // worker it still knows; a coordinator that declared this worker lost
        // has failed its attempt, which must then write nothing more.
        if (response.registered() && !running_stopped_) lease_renewed_at_ = sent;
        if (!response.registered() && !running_job_.empty() && !lease_lost_) {
          LOG(WARNING) << "the coordinator declared this worker lost: job " << running_job_
                       << " attempt " << running_attempt_ << " lost its lease and stops";
          lease_lost_ = true;
        }
      }
      if (status.ok() && !response.registered()) {
        LOG(WARNING) << "the coordinator forgot worker " << request.worker_id()
                     << "; registering again";
        {
          absl::MutexLock lock(&mu_);
          registered_ = false;
        }
        status = EnsureRegistered();
      } else if (status.code() == absl::StatusCode::kNotFound) {
        absl::MutexLock lock(&mu_);
        registered_ = false;
      }
    }
    if (!status.ok() && healthy)
      LOG(WARNING) << "heartbeat failed (will retry): " << status.message();
    if (status.ok() && !healthy) LOG(INFO) << "heartbeats resumed";
    healthy = status.ok();
  }
}

absl::StatusOr<std::optional<v1::Assignment>> WorkerAgent::PollAssignment() {
  v1::GetAssignmentRequest request;
  grpc::ClientContext context;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return std::optional<v1::Assignment>();
    request.set_worker_id(worker_id_);
    poll_context_ = &context;
  }
  request.set_wait_seconds(kPollWaitSeconds);
  PrepareContext(context, options_.token, milliseconds((kPollWaitSeconds + 10) * 1000));
  v1::GetAssignmentResponse response;
  const auto start = Clock::now();
  const grpc::Status rpc = stub_->GetAssignment(&context, request, &response);
  {
    absl::MutexLock lock(&mu_);
    poll_context_ = nullptr;
  }
  if (stopping()) return std::optional<v1::Assignment>();
  RETURN_IF_ERROR(FromGrpcStatus(rpc));
  if (!response.has_assignment()) {
    // A coordinator that answers at once instead of waiting must not be polled in a busy loop.
    if (Clock::now() - start < milliseconds(200)) SleepFor(milliseconds(500));
    return std::optional<v1::Assignment>();
  }
  return std::optional<v1::Assignment>(response.assignment());
}

absl::Status WorkerAgent::Run() {
  if (options_.compute_threads > 0) omp_set_num_threads(options_.compute_threads);
  Backoff backoff;
  // The first registration decides whether this worker is welcome at all.
  while (!stopping()) {
    absl::Status status = EnsureRegistered();
    if (status.ok()) break;
    if (IsPermanent(status)) return status;
    LOG(WARNING) << "cannot register with " << options_.coordinator
                 << " (will retry): " << status.message();
    SleepFor(backoff.Next());
  }
  if (stopping()) return absl::OkStatus();
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });

  backoff.Reset();
  bool healthy = true;
  absl::Status fatal;
  while (!stopping()) {
    absl::Status status = EnsureRegistered();
    absl::StatusOr<std::optional<v1::Assignment>> assignment =
        status.ok() ? PollAssignment() : status;
    if (!assignment.ok()) {
      status = assignment.status();
      if (status.code() == absl::StatusCode::kUnauthenticated ||
          status.code() == absl::StatusCode::kPermissionDenied) {
        fatal = status;
        break;
      }
      if (status.code() == absl::StatusCode::kNotFound ||
          status.code() == absl::StatusCode::kFailedPrecondition) {
        absl::MutexLock lock(&mu_);
        registered_ = false;  // the coordinator does not know this worker (any more)
      }
      if (healthy) LOG(WARNING) << "asking for work failed (will retry): " << status.message();
      healthy = false;
      SleepFor(backoff.Next());
      continue;
    }
    if (!healthy) LOG(INFO) << "connected to " << options_.coordinator << " again";
    healthy = true;
    backoff.Reset();
    if (assignment->has_value()) RunAssignment(**assignment);
  }
  Stop();
  heartbeat_thread_.join();
  return fatal;
}

void WorkerAgent::LearnWhyStopped(const v1::Assignment& assignment) {
  Backoff backoff;
  for (int tries = 0; tries < 5 && !stopping(); ++tries) {
    v1::HeartbeatRequest request;
    request.set_worker_id(worker_id());
    request.mutable_running()->set_job_id(assignment.job_id());
    request.mutable_running()->set_attempt(assignment.attempt());
    grpc::ClientContext context;
    PrepareContext(context, options_.token, kCallTimeout);
    v1::HeartbeatResponse response;
    const absl::Status status = FromGrpcStatus(stub_->Heartbeat(&context, request, &response));
    if (status.ok()) {
      for (const v1::AttemptRef& ref : response.checkpoint_attempts()) {
        RequestCheckpoint(ref.job_id(), ref.attempt());
      }
      absl::MutexLock lock(&mu_);
      for (const v1::AttemptRef& ref : response.stop_attempts()) {
        if (ref.job_id() == running_job_ && ref.attempt() == running_attempt_) {
          running_stopped_ = true;
        }
      }
      return;
    }
    if (!IsTransient(status)) return;
    std::this_thread::sleep_for(backoff.Next());
  }
}

absl::StatusOr<bool> WorkerAgent::SendProgress(const v1::Assignment& assignment,
                                               const ProgressUpdate& update) {
  v1::ReportProgressRequest request;
  request.set_worker_id(worker_id());
  request.set_job_id(assignment.job_id());
  request.set_attempt(assignment.attempt());
  request.set_rank(assignment.rank());
  if (update.progress.has_value()) *request.mutable_progress() = *update.progress;
  request.set_checkpoint(update.checkpoint);
  request.set_message(update.message);
  grpc::ClientContext context;
  PrepareContext(context, options_.token, kCallTimeout);
  v1::ReportProgressResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(stub_->ReportProgress(&context, request, &response)));
  if (response.checkpoint_and_stop()) RequestCheckpoint(assignment.job_id(), assignment.attempt());
  return response.cancel_requested();
}

absl::Status WorkerAgent::SendOutput(const v1::Assignment& assignment,
                                     const OutputShipper::Batch& batch) {
  v1::AppendOutputRequest request;
  request.set_worker_id(worker_id());
  request.set_job_id(assignment.job_id());
  request.set_attempt(assignment.attempt());
  request.set_rank(assignment.rank());
  request.set_metrics_first(batch.metrics_first);
  for (const std::string& line : batch.metrics) request.add_metrics_lines(line);
  request.set_logs_first(batch.logs_first);
  for (const std::string& line : batch.logs) request.add_log_lines(line);
  grpc::ClientContext context;
  PrepareContext(context, options_.token, kCallTimeout);
  v1::AppendOutputResponse response;
  return FromGrpcStatus(stub_->AppendOutput(&context, request, &response));
}

void WorkerAgent::SendFinish(const v1::FinishRequest& request) {
  // The job's output reaches the coordinator before its outcome, so that
  // whoever follows it has every line once the job has ended.
  if (output_ != nullptr) output_->Flush(stopping() ? absl::Seconds(5) : absl::Seconds(30));
  Backoff backoff;
  const auto start = Clock::now();
  int reregistrations = 3;
  while (true) {
    v1::FinishRequest r = request;
    r.set_worker_id(worker_id());
    grpc::ClientContext context;
    PrepareContext(context, options_.token, kCallTimeout);
    v1::FinishResponse response;
    const absl::Status status = FromGrpcStatus(stub_->Finish(&context, r, &response));
    if (status.ok()) return;
    if (status.code() == absl::StatusCode::kNotFound && reregistrations > 0) {
      // A restarted coordinator that has not heard from this worker yet: register again
      // (under the same id, which still holds the attempt) and retry.
      --reregistrations;
      {
        absl::MutexLock lock(&mu_);
        registered_ = false;
      }
      if (!EnsureRegistered().ok()) std::this_thread::sleep_for(backoff.Next());
      continue;
    }
    if (!IsTransient(status)) {
      LOG(WARNING) << "job " << r.job_id()
                   << ": the coordinator refused the outcome: " << status.message();
      return;
    }
    // When shutting down, give the coordinator a few seconds; its lease expiry covers the rest.
    if (stopping() && Clock::now() - start > std::chrono::seconds(5)) {
      LOG(WARNING) << "job " << r.job_id() << ": outcome not delivered: " << status.message();
      return;
    }
    std::this_thread::sleep_for(backoff.Next());
  }
}

void WorkerAgent::RunAssignment(const v1::Assignment& assignment) {
  // The job's output goes to the coordinator too (sbp metrics, sbp logs):
  // its metrics lines, and every line logged on this thread while it runs
  // the job (no other job's: each job runs on its worker's own thread).
  OutputShipper output([this, &assignment](const OutputShipper::Batch& batch) {
    return SendOutput(assignment, batch);
  });
  ScopedLogSink capture(&output);
  output_ = &output;
  absl::Cleanup forget = [this, &output] {
    output_ = nullptr;
    output.Flush(stopping() ? absl::Seconds(2) : absl::Seconds(10));
  };
  LOG(INFO) << "running job " << assignment.job_id() << " attempt " << assignment.attempt()
            << " (rank " << assignment.rank() << " of " << assignment.world_size() << ")";
  v1::FinishRequest finish;
  finish.set_job_id(assignment.job_id());
  finish.set_attempt(assignment.attempt());
  finish.set_rank(assignment.rank());

  absl::StatusOr<JobSpec> spec =
      ParseJobSpec(assignment.spec_yaml(), absl::StrCat("job ", assignment.job_id()));
  if (!spec.ok()) {
    finish.set_outcome(v1::OUTCOME_FAILED);
    finish.set_failure_class(ClassifyFailure(spec.status()));
    finish.set_message(std::string(spec.status().message()));
    SendFinish(finish);
    return;
  }
  // The paths are checked again here, right before anything is opened: a
  // symbolic link planted after the submit must not lead a job outside.
  const PathPolicy paths_policy{options_.work_dir, options_.shared_dir, assignment.run_area(),
                                options_.confine_paths};
  if (absl::Status paths = CheckJobPaths(*spec, paths_policy); !paths.ok()) {
    finish.set_outcome(v1::OUTCOME_FAILED);
    finish.set_failure_class(ClassifyFailure(paths));
    finish.set_message(std::string(paths.message()));
    SendFinish(finish);
    return;
  }
  // The worker's capacity is the allocator budget unless the job asks for less.
  if (spec->resources.memory_bytes <= 0 || spec->resources.memory_bytes > options_.memory_bytes) {
    spec->resources.memory_bytes = options_.memory_bytes;
  }

  ProgressReporter reporter([this, &assignment](const ProgressUpdate& update) {
    return SendProgress(assignment, update);
  });
  Observer observer(this, assignment, &reporter);
  TrainOptions train_options;
  // Every relative path of the job resolves in its owner's area.
  train_options.base_dir = JobArea(paths_policy);  // "" without a work directory
  train_options.device = DeviceName(options_.device);
  train_options.job_id = assignment.job_id();
  train_options.attempt = assignment.attempt();
  train_options.resume = true;
  // What `checkpoints: auto` may use beside the device (the coordinator
  // placed the job on this worker by the same figures).
  train_options.offload.host_memory_bytes = options_.host_memory_bytes;
  train_options.offload.disk_bytes = options_.offload_disk_bytes;
  train_options.allow_reward_programs = options_.allow_reward_programs;
  if (assignment.world_size() > 1) {
    // Ranks meet through the coordinator's key-value service, in a scope of
    // this attempt, so that a retry never meets a stale rank; the device
    // picks the communicator (Gloo on CPUs, NCCL on GPUs).
    CollectiveOptions collective;
    collective.rank = assignment.rank();
    collective.world_size = assignment.world_size();
    collective.host = options_.collective_host;
    collective.timeout = options_.collective_timeout;
    auto rendezvous = [this, &assignment] {
      return std::make_unique<CoordinatorRendezvousStore>(
          std::shared_ptr<v1::RendezvousService::StubInterface>(
              v1::RendezvousService::NewStub(channel_)),
          options_.token, assignment.rendezvous_scope(), options_.collective_timeout, worker_id());
    };
    train_options.connect = [rendezvous, collective](
                                Backend& backend) -> absl::StatusOr<std::unique_ptr<Communicator>> {
      return ConnectCommunicator(*rendezvous(), backend, collective);
    };
    // The ranks that share a sequence (resources.sequence_parallel) meet
    // under their group's prefix of the same attempt's rendezvous.
    train_options.connect_sequence_group =
        [rendezvous, collective](Backend& backend,
                                 int group_size) -> absl::StatusOr<std::unique_ptr<Communicator>> {
      return ConnectSequenceGroup(*rendezvous(), backend, collective, group_size);
    };
  }
  current_bytes_ = 0;
  peak_bytes_ = 0;
  {
    absl::MutexLock lock(&mu_);
    running_job_ = assignment.job_id();
    running_attempt_ = assignment.attempt();
    running_stopped_ = false;
    running_checkpoint_ = false;
    lease_lost_ = false;
  }
  const absl::StatusOr<TrainSummary> summary = [&] {
    // What the job opens stays inside its owner's area (reads also in the
    // shared directory), checked on the opened descriptors, so that a
    // symbolic link swapped in after the check above leads nowhere.
    std::optional<ScopedFileConfinement> confinement;
    if (!options_.work_dir.empty() && options_.confine_paths) {
      FileConfinement rules;
      rules.write_roots.push_back(JobArea(paths_policy));
      rules.read_roots = JobReadRoots(paths_policy);
      confinement.emplace(std::move(rules));
    }
    return RunTraining(*spec, train_options, &observer);
  }();
  if (summary.ok() && summary->stopped_early && !stopping() && !reporter.cancel_requested() &&
      !CheckpointRequested() && !RunningAttemptStopped()) {
    // Another rank ended the run (the ranks agree on every stop): ask why.
    LearnWhyStopped(assignment);
  }
  bool superseded = false, preempted = false;
  {
    absl::MutexLock lock(&mu_);
    superseded = running_stopped_;
    preempted = running_checkpoint_;
    running_job_.clear();
    running_attempt_ = -1;
    running_stopped_ = false;
    running_checkpoint_ = false;
  }
  current_bytes_ = 0;
  metrics_->SetMemory(0, peak_bytes_);
  metrics_->EndRun();

  // Deliver the last progress and checkpoint notice before anything else.
  if (!reporter.Flush(stopping() ? absl::Seconds(5) : absl::Seconds(60)) && !reporter.aborted()) {
    LOG(WARNING) << "job " << assignment.job_id()
                 << ": last progress not delivered: " << reporter.last_error().message();
  }
  if (reporter.aborted() || superseded) {
    // The attempt's own failure (a collective that outlived its peer) is
    // still worth a line: it is what an operator reads on this worker.
    LOG(WARNING) << "job " << assignment.job_id() << " attempt " << assignment.attempt()
                 << " is over at the coordinator; dropped it"
                 << (summary.ok()
                         ? std::string()
                         : absl::StrCat(" (here it had failed: ", summary.status().message(), ")"));
    return;
  }
  if (summary.ok() && summary->stopped_early && !reporter.cancel_requested() &&
      (!preempted || stopping())) {
    // The worker is shutting down. Reporting an outcome now would free this worker in
    // the scheduler, which would hand the retry straight back to it; instead the
    // attempt is left to the lease, whose expiry retries it (LOST_WORKER) elsewhere
    // from the checkpoint just written and reported.
    LOG(WARNING) << "job " << assignment.job_id() << " attempt " << assignment.attempt()
                 << " stopped after step " << summary->last_step << " (checkpoint "
                 << summary->last_checkpoint << ") because this worker is shutting down; "
                 << "the coordinator retries it elsewhere when the lease expires";
    return;
  }
  if (!summary.ok()) {
    LOG(WARNING) << "job " << assignment.job_id() << " failed: " << summary.status();
    finish.set_outcome(v1::OUTCOME_FAILED);
    finish.set_failure_class(ClassifyFailure(summary.status()));
    finish.set_message(std::string(summary.status().message()));
  } else if (summary->stopped_early && !reporter.cancel_requested()) {
    finish.set_outcome(v1::OUTCOME_PREEMPTED);
    finish.set_message(
        absl::StrCat("preempted: stopped after step ", summary->last_step,
                     summary->last_checkpoint.empty()
                         ? std::string()
                         : absl::StrCat(" with checkpoint ", summary->last_checkpoint)));
  } else if (summary->stopped_early) {
    finish.set_outcome(v1::OUTCOME_CANCELLED);
    finish.set_message(
        absl::StrCat("stopped after step ", summary->last_step,
                     summary->last_checkpoint.empty()
                         ? std::string(" (no checkpoint yet)")
                         : absl::StrCat(" with checkpoint ", summary->last_checkpoint)));
  } else {
    finish.set_outcome(v1::OUTCOME_SUCCEEDED);
    finish.set_message(
        absl::StrCat("finished at step ", summary->last_step, ", loss ", summary->final_loss));
  }
  LOG(INFO) << "job " << assignment.job_id() << ": " << v1::Outcome_Name(finish.outcome()) << " ("
            << finish.message() << ")";
  SendFinish(finish);
}

}  // namespace sbp
