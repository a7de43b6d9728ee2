#include "server/job_service.h"

#include "server/proto_convert.h"

namespace sbp::server {
namespace {

namespace v1 = streambp::v1;

constexpr char kSubmit[] = "streambp.v1.JobService/Submit";
constexpr char kGet[] = "streambp.v1.JobService/Get";
constexpr char kList[] = "streambp.v1.JobService/List";
constexpr char kCancel[] = "streambp.v1.JobService/Cancel";
constexpr char kWatch[] = "streambp.v1.JobService/Watch";
constexpr char kEvents[] = "streambp.v1.JobService/Events";
constexpr char kListWorkers[] = "streambp.v1.JobService/ListWorkers";

// How often a waiting Watch checks whether its client went away.
constexpr absl::Duration kWatchPoll = absl::Seconds(1);

}  // namespace

grpc::Status JobServiceImpl::Submit(grpc::ServerContext* context,
                                    const v1::SubmitJobRequest* request,
                                    v1::SubmitJobResponse* response) {
  return guard_->Run(*context, Role::kClient, kSubmit, [&]() -> absl::Status {
    absl::StatusOr<SubmitResult> result =
        manager_->Submit(request->spec_yaml(), request->request_id());
    if (!result.ok()) return result.status();
    ToProto(result->job, response->mutable_job());
    response->set_created(result->created);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::Get(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                 v1::Job* response) {
  return guard_->Run(*context, Role::kClient, kGet, [&]() -> absl::Status {
    absl::StatusOr<JobRecord> job = manager_->GetJob(request->id());
    if (!job.ok()) return job.status();
    ToProto(*job, response);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::List(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                                  v1::ListJobsResponse* response) {
  return guard_->Run(*context, Role::kClient, kList, [&]() -> absl::Status {
    std::vector<JobState> states;
    for (int state : request->states()) {
      JobState s = FromProto(static_cast<v1::JobState>(state));
      if (s == JobState::kUnspecified) {
        return absl::InvalidArgumentError(
            absl::StrCat("states: ", state, " is not a job state to filter by"));
      }
      states.push_back(s);
    }
    absl::StatusOr<JobPage> page =
        manager_->ListJobs(states, request->page_size(), request->page_token());
    if (!page.ok()) return page.status();
    for (const JobRecord& job : page->jobs) ToProto(job, response->add_jobs());
    response->set_next_page_token(page->next_page_token);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::Cancel(grpc::ServerContext* context,
                                    const v1::CancelJobRequest* request, v1::Job* response) {
  return guard_->Run(*context, Role::kClient, kCancel, [&]() -> absl::Status {
    absl::StatusOr<JobRecord> job = manager_->Cancel(request->id(), request->reason());
    if (!job.ok()) return job.status();
    ToProto(*job, response);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::Watch(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                                   grpc::ServerWriter<v1::JobUpdate>* writer) {
  return guard_->Run(*context, Role::kClient, kWatch,
                     [&] { return StreamJob(context, request->id(), writer); });
}

absl::Status JobServiceImpl::StreamJob(grpc::ServerContext* context, const std::string& id,
                                       grpc::ServerWriter<v1::JobUpdate>* writer) {
  // Subscribe before the snapshot so that no change falls in between.
  std::unique_ptr<WatchHub::Subscription> subscription = hub_->Subscribe(id);
  absl::StatusOr<JobRecord> snapshot = manager_->GetJob(id);
  if (!snapshot.ok()) return snapshot.status();
  int64_t revision = snapshot->revision;
  v1::JobUpdate update;
  ToProto(*snapshot, update.mutable_job());
  if (!writer->Write(update)) return absl::CancelledError("the client went away");
  if (IsTerminal(snapshot->state)) return absl::OkStatus();
  while (true) {
    std::vector<WatchHub::Snapshot> changes = subscription->Next(kWatchPoll);
    for (const WatchHub::Snapshot& job : changes) {
      if (job->revision <= revision) continue;
      revision = job->revision;
      update.Clear();
      ToProto(*job, update.mutable_job());
      if (!writer->Write(update)) return absl::CancelledError("the client went away");
      if (IsTerminal(job->state)) return absl::OkStatus();
    }
    if (context->IsCancelled()) return absl::CancelledError("the client went away");
    if (changes.empty() && subscription->closed()) {
      return absl::UnavailableError("the coordinator is shutting down; watch again");
    }
  }
}

grpc::Status JobServiceImpl::Events(grpc::ServerContext* context,
                                    const v1::JobEventsRequest* request,
                                    v1::JobEventsResponse* response) {
  return guard_->Run(*context, Role::kClient, kEvents, [&]() -> absl::Status {
    absl::StatusOr<std::vector<JobEventRecord>> events =
        manager_->Events(request->id(), request->after_sequence());
    if (!events.ok()) return events.status();
    for (const JobEventRecord& event : *events) ToProto(event, response->add_events());
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::ListWorkers(grpc::ServerContext* context,
                                         const v1::ListWorkersRequest* request,
                                         v1::ListWorkersResponse* response) {
  return guard_->Run(*context, Role::kClient, kListWorkers, [&]() -> absl::Status {
    for (const WorkerView& worker : manager_->ListWorkers()) {
      ToProto(worker, response->add_workers());
    }
    return absl::OkStatus();
  });
}

}  // namespace sbp::server
