#include "server/job_service.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
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
constexpr char kWhoAmI[] = "streambp.v1.JobService/WhoAmI";

// A page that carries specs (up to 64 KiB each) stays under gRPC's default
// 4 MiB receive limit of clients.
constexpr int kMaxPageSizeWithSpec = 50;

class WatchStream;

}  // namespace

// Moves Watch streams along after a publish, off the publisher's thread: the
// job manager publishes under its lock, which heartbeats also take, so the
// hub's listener only queues the stream here (once, however many changes
// arrive before it is served) and this thread does the conversion and starts
// the write. One thread serves every stream; a stream with a write in flight
// costs it a lock and a flag.
class JobServiceImpl::WatchFanout {
 public:
  WatchFanout() : thread_([this] { Run(); }) {}
  ~WatchFanout() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  void Enqueue(std::weak_ptr<WatchStream> stream) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(stream));
  }

 private:
  void Run();
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); }

  absl::Mutex mu_;
  std::deque<std::weak_ptr<WatchStream>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

namespace {

// One Watch stream: the job's snapshot, then newer versions of it, one write
// at a time, until the job ends, the client goes away or the coordinator
// shuts down. It holds no thread: the fan-out thread and gRPC's write
// completions move it along. When changes arrive faster than the client
// reads, runs of snapshots in the same state collapse to the newest (every
// state change is still delivered; only intermediate progress is skipped).
// It owns itself (self_) until OnDone; the fan-out reaches it through a weak
// pointer, so a publish that races with the end of the stream finds it
// either alive or gone, never half destroyed.
//
// Lock order: mu_ -> the hub's lock. Nothing here calls into the job manager
// while holding mu_, and StartWrite/Finish are called without mu_.
class WatchStream final : public grpc::ServerWriteReactor<v1::JobUpdate> {
 public:
  static WatchStream* Start(JobManager* manager, WatchHub* hub, const RpcGuard* guard,
                            JobServiceImpl::WatchFanout* fanout,
                            grpc::CallbackServerContext* context, const std::string& id) {
    std::shared_ptr<WatchStream> stream(new WatchStream(guard));
    stream->self_ = stream;
    absl::Status status = stream->Open(manager, hub, fanout, context, id);
    if (!status.ok()) {
      {
        absl::MutexLock lock(&stream->mu_);
        stream->finished_ = true;
      }
      stream->End(status);
    } else {
      stream->Pump();
    }
    return stream.get();
  }

  void OnWriteDone(bool ok) override {
    absl::Status end;
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (finished_) return;
      if (!ok) {
        end = absl::CancelledError("the client went away");
        finish = true;
      } else if (wrote_terminal_) {
        finish = true;  // OK: the job ended and the client has its final state
      }
      finished_ = finish;
    }
    if (finish) {
      End(end);
    } else {
      Pump();
    }
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      // A write in flight fails and OnWriteDone ends the call.
      if (finished_ || writing_) return;
      finished_ = true;
    }
    End(absl::CancelledError("the client went away"));
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&mu_);
      finished_ = true;
      subscription_.reset();
      slot_.Release();
    }
    std::shared_ptr<WatchStream> self = std::move(self_);  // may delete this on return
  }

  explicit WatchStream(const RpcGuard* guard) : guard_(guard) {}

  // Starts the next write, or ends the call when the hub shut down.
  void Pump() {
    queued_.store(false, std::memory_order_release);
    bool write = false, finish = false;
    {
      absl::MutexLock lock(&mu_);
      if (subscription_ == nullptr || writing_ || finished_) return;
      for (WatchHub::Snapshot& job : subscription_->Take()) pending_.push_back(std::move(job));
      while (!pending_.empty() && pending_.front()->revision <= revision_) pending_.pop_front();
      while (revision_sent_ && pending_.size() > 1 && pending_[0]->state == pending_[1]->state) {
        pending_.pop_front();
      }
      if (!pending_.empty()) {
        const WatchHub::Snapshot job = std::move(pending_.front());
        pending_.pop_front();
        revision_ = job->revision;
        wrote_terminal_ = IsTerminal(job->state);
        update_.Clear();
        ToProto(*job, update_.mutable_job());
        // The spec never changes: the snapshot carries it, updates do not.
        if (revision_sent_) update_.mutable_job()->clear_spec_yaml();
        revision_sent_ = true;
        writing_ = write = true;
      } else if (subscription_->closed()) {
        finished_ = finish = true;
      }
    }
    if (write) {
      StartWrite(&update_);
    } else if (finish) {
      End(absl::UnavailableError("the coordinator is shutting down; watch again"));
    }
  }

 private:
  absl::Status Open(JobManager* manager, WatchHub* hub, JobServiceImpl::WatchFanout* fanout,
                    grpc::CallbackServerContext* context, const std::string& id) {
    absl::StatusOr<Identity> caller = guard_->Authorize(*context, Role::kClient, kWatch);
    if (!caller.ok()) return caller.status();
    absl::StatusOr<RpcGuard::StreamSlot> slot =
        guard_->OpenStream(StreamKind::kWatch, *context, &*caller);
    if (!slot.ok()) return slot.status();
    // Subscribe before the snapshot so that no change falls in between.
    std::unique_ptr<WatchHub::Subscription> subscription = hub->Subscribe(id);
    std::weak_ptr<WatchStream> weak = self_;
    subscription->SetListener([weak, fanout] {
      std::shared_ptr<WatchStream> stream = weak.lock();
      if (stream != nullptr && !stream->queued_.exchange(true, std::memory_order_acq_rel)) {
        fanout->Enqueue(weak);
      }
    });
    absl::StatusOr<JobRecord> snapshot = manager->GetJob(*caller, id);
    if (!snapshot.ok()) return snapshot.status();
    absl::MutexLock lock(&mu_);
    slot_ = *std::move(slot);
    subscription_ = std::move(subscription);
    pending_.push_front(std::make_shared<const JobRecord>(*std::move(snapshot)));
    return absl::OkStatus();
  }

  void End(const absl::Status& status) { Finish(guard_->Finish(kWatch, status)); }

  const RpcGuard* const guard_;
  std::shared_ptr<WatchStream> self_;
  std::atomic<bool> queued_{false};  // waiting in the fan-out's queue
  absl::Mutex mu_;
  RpcGuard::StreamSlot slot_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<WatchHub::Subscription> subscription_ ABSL_GUARDED_BY(mu_);
  std::deque<WatchHub::Snapshot> pending_ ABSL_GUARDED_BY(mu_);
  int64_t revision_ ABSL_GUARDED_BY(mu_) = -1;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool revision_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool wrote_terminal_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish called or about to be
  v1::JobUpdate update_;                        // the write in flight; touched only by the writer
};

}  // namespace

void JobServiceImpl::WatchFanout::Run() {
  while (true) {
    std::deque<std::weak_ptr<WatchStream>> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &WatchFanout::Ready));
      if (stop_) return;
      batch.swap(queue_);
    }
    for (const std::weak_ptr<WatchStream>& weak : batch) {
      if (std::shared_ptr<WatchStream> stream = weak.lock()) stream->Pump();
    }
  }
}

JobServiceImpl::JobServiceImpl(JobManager* manager, WatchHub* hub, const RpcGuard* guard)
    : manager_(manager),
      hub_(hub),
      guard_(guard),
      fanout_(std::make_unique<WatchFanout>()),
      output_streams_(std::make_unique<OutputStreams>(manager, hub, guard)) {}

JobServiceImpl::~JobServiceImpl() = default;

grpc::Status JobServiceImpl::Submit(grpc::ServerContext* context,
                                    const v1::SubmitJobRequest* request,
                                    v1::SubmitJobResponse* response) {
  return guard_->Run(*context, Role::kClient, kSubmit, [&](const Identity& caller) -> absl::Status {
    absl::StatusOr<SubmitResult> result =
        manager_->Submit(caller, request->spec_yaml(), request->request_id());
    if (!result.ok()) return result.status();
    ToProto(result->job, response->mutable_job());
    response->set_created(result->created);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::Get(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                 v1::Job* response) {
  return guard_->Run(*context, Role::kClient, kGet, [&](const Identity& caller) -> absl::Status {
    absl::StatusOr<JobRecord> job = manager_->GetJob(caller, request->id());
    if (!job.ok()) return job.status();
    ToProto(*job, response);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::List(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                                  v1::ListJobsResponse* response) {
  return guard_->Run(*context, Role::kClient, kList, [&](const Identity& caller) -> absl::Status {
    std::vector<JobState> states;
    for (int state : request->states()) {
      JobState s = FromProto(static_cast<v1::JobState>(state));
      if (s == JobState::kUnspecified) {
        return absl::InvalidArgumentError(
            absl::StrCat("states: ", state, " is not a job state to filter by"));
      }
      states.push_back(s);
    }
    int page_size = request->page_size();
    if (request->with_spec() && page_size >= 0) {
      page_size = std::min(page_size == 0 ? kDefaultPageSize : page_size, kMaxPageSizeWithSpec);
    }
    absl::StatusOr<JobPage> page = manager_->ListJobs(
        caller, states, page_size, request->page_token(), request->with_spec(), request->user());
    if (!page.ok()) return page.status();
    for (const JobRecord& job : page->jobs) ToProto(job, response->add_jobs());
    response->set_next_page_token(page->next_page_token);
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::Cancel(grpc::ServerContext* context,
                                    const v1::CancelJobRequest* request, v1::Job* response) {
  return guard_->Run(*context, Role::kClient, kCancel, [&](const Identity& caller) -> absl::Status {
    absl::StatusOr<JobRecord> job = manager_->Cancel(caller, request->id(), request->reason());
    if (!job.ok()) return job.status();
    ToProto(*job, response);
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::JobUpdate>* JobServiceImpl::Watch(grpc::CallbackServerContext* context,
                                                               const v1::WatchJobRequest* request) {
  return WatchStream::Start(manager_, hub_, guard_, fanout_.get(), context, request->id());
}

grpc::Status JobServiceImpl::Events(grpc::ServerContext* context,
                                    const v1::JobEventsRequest* request,
                                    v1::JobEventsResponse* response) {
  return guard_->Run(*context, Role::kClient, kEvents, [&](const Identity& caller) -> absl::Status {
    absl::StatusOr<std::vector<JobEventRecord>> events =
        manager_->Events(caller, request->id(), request->after_sequence());
    if (!events.ok()) return events.status();
    for (const JobEventRecord& event : *events) ToProto(event, response->add_events());
    return absl::OkStatus();
  });
}

grpc::Status JobServiceImpl::ListWorkers(grpc::ServerContext* context,
                                         const v1::ListWorkersRequest* request,
                                         v1::ListWorkersResponse* response) {
  return guard_->Run(*context, Role::kClient, kListWorkers,
                     [&](const Identity& caller) -> absl::Status {
                       for (const WorkerView& worker : manager_->ListWorkers(caller)) {
                         ToProto(worker, response->add_workers());
                       }
                       return absl::OkStatus();
                     });
}

grpc::Status JobServiceImpl::WhoAmI(grpc::ServerContext* context, const v1::WhoAmIRequest* request,
                                    v1::WhoAmIResponse* response) {
  return guard_->Run(*context, Role::kClient, kWhoAmI, [&](const Identity& caller) -> absl::Status {
    response->set_name(caller.name);
    response->set_role(std::string(IdentityRoleName(caller.role)));
    response->set_max_running_workers(caller.quota.max_running_workers);
    response->set_max_pending_jobs(caller.quota.max_pending_jobs);
    response->set_has_max_priority(caller.quota.max_priority.has_value());
    response->set_max_priority(caller.quota.max_priority.value_or(0));
    return absl::OkStatus();
  });
}

}  // namespace sbp::server
