#include "server/job_output_stream.h"

#include <atomic>
#include <utility>

#include "google/protobuf/util/time_util.h"
#include "server/job_service.h"
#include "server/output_hub.h"

namespace sbp::server {
namespace {

namespace v1 = streambp::v1;

constexpr char kMetrics[] = "streambp.v1.JobService/Metrics";
constexpr char kLogs[] = "streambp.v1.JobService/Logs";

void ToProto(const OutputPage& page, v1::JobOutputChunk* chunk) {
  chunk->Clear();
  for (const OutputLine& line : page.lines) {
    v1::JobOutputLine* out = chunk->add_lines();
    out->set_cursor(line.cursor);
    out->set_attempt(line.attempt);
    out->set_rank(line.rank);
    *out->mutable_time() =
        google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(line.time));
    out->set_text(line.text);
  }
  for (const OutputSummary& summary : page.summaries) {
    v1::JobOutputSummary* out = chunk->add_summaries();
    out->set_attempt(summary.attempt);
    out->set_rank(summary.rank);
    out->set_lines(summary.lines);
    out->set_dropped(summary.dropped);
    out->set_stride(summary.stride);
  }
  chunk->set_max_lines(page.caps.max_lines);
  chunk->set_max_bytes(page.caps.max_bytes);
}

}  // namespace

// One Metrics or Logs call. It owns itself (self_) until OnDone; the
// fan-out and the hubs' listeners reach it through weak pointers. Only the
// fan-out thread reads pages and starts writes (Pump), one at a time per
// stream; gRPC's callbacks only note what happened and queue it.
class OutputStreams::Stream final : public grpc::ServerWriteReactor<v1::JobOutputChunk> {
 public:
  Stream(OutputStreams* owner, OutputKind kind)
      : owner_(owner), kind_(kind), method_(kind == OutputKind::kMetrics ? kMetrics : kLogs) {}

  absl::Status Open(grpc::CallbackServerContext* context, const v1::JobOutputRequest& request) {
    absl::StatusOr<Identity> caller = owner_->guard_->Authorize(*context, Role::kClient, method_);
    if (!caller.ok()) return caller.status();
    absl::StatusOr<RpcGuard::StreamSlot> slot =
        owner_->guard_->OpenStream(StreamKind::kWatch, *context, &*caller);
    if (!slot.ok()) return slot.status();
    query_.job_id = request.id();
    query_.kind = kind_;
    query_.attempt = request.attempt();
    query_.after_cursor = request.after_cursor();
    query_.from_step = kind_ == OutputKind::kMetrics ? request.from_step() : 0;
    follow_ = request.follow();
    // The owner or an admin, as Get; nothing is subscribed for anyone else.
    absl::StatusOr<JobRecord> job = owner_->manager_->GetJob(*caller, request.id());
    if (!job.ok()) return job.status();
    std::unique_ptr<WatchHub::Subscription> watch;
    std::unique_ptr<OutputHub::Subscription> lines;
    if (follow_) {
      std::weak_ptr<Stream> weak = self_;
      OutputStreams* owner = owner_;
      auto wake = [weak, owner] {
        std::shared_ptr<Stream> stream = weak.lock();
        if (stream != nullptr && !stream->queued_.exchange(true)) owner->Enqueue(weak);
      };
      watch = owner_->hub_->Subscribe(request.id());
      watch->SetListener(wake);
      lines = owner_->manager_->output_hub().Subscribe(request.id(), wake);
    }
    absl::MutexLock lock(&mu_);
    caller_ = *std::move(caller);
    slot_ = *std::move(slot);
    watch_ = std::move(watch);
    lines_ = std::move(lines);
    return absl::OkStatus();
  }

  // Writes the next page, waits for news (following, caught up), or ends
  // the call.
  void Pump() {
    queued_.store(false);
    bool closed = false;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finished_) return;
      if (watch_ != nullptr) {
        watch_->Take();  // only the news matters; the page says whether the job ended
        closed = watch_->closed();
      }
    }
    if (closed)
      return Fail(absl::UnavailableError("the coordinator is shutting down; follow again"));
    absl::StatusOr<OutputPage> page = owner_->manager_->ReadOutput(caller_, query_);
    if (!page.ok()) return Fail(page.status());
    const bool last = !page->more && (!follow_ || page->ended);
    if (page->lines.empty() && !last && wrote_any_) return;  // caught up: wait for news
    if (!page->lines.empty()) query_.after_cursor = page->lines.back().cursor;
    ToProto(*page, &chunk_);
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      writing_ = true;
      last_ = last;
    }
    wrote_any_ = true;
    StartWrite(&chunk_);
  }

  void End(const absl::Status& status) { Finish(owner_->guard_->Finish(method_, status)); }

  // Ends the call with `status` unless it is ending already.
  void Fail(const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    End(status);
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
      } else if (last_) {
        finish = true;  // OK: caught up (or the job ended) and written
      }
      finished_ = finish;
    }
    if (finish) return End(end);
    Wake();
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
    std::unique_ptr<WatchHub::Subscription> watch;
    std::unique_ptr<OutputHub::Subscription> lines;
    {
      absl::MutexLock lock(&mu_);
      finished_ = true;
      watch = std::move(watch_);
      lines = std::move(lines_);
      slot_.Release();
    }
    watch.reset();
    lines.reset();
    std::shared_ptr<Stream> self = std::move(self_);  // may delete this on return
  }

  void Wake() {
    if (!queued_.exchange(true)) owner_->Enqueue(self_);
  }

  std::shared_ptr<Stream> self_;
  std::atomic<bool> queued_{false};  // waiting in the fan-out's queue

 private:
  OutputStreams* const owner_;
  const OutputKind kind_;
  const char* const method_;
  // Set by Open, then used by the fan-out thread only.
  Identity caller_;
  OutputQuery query_;
  bool follow_ = false;
  bool wrote_any_ = false;
  v1::JobOutputChunk chunk_;  // the write in flight

  absl::Mutex mu_;
  RpcGuard::StreamSlot slot_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<WatchHub::Subscription> watch_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<OutputHub::Subscription> lines_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool last_ ABSL_GUARDED_BY(mu_) = false;      // end the call after the write in flight
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish called or about to be
};

OutputStreams::OutputStreams(JobManager* manager, WatchHub* hub, const RpcGuard* guard)
    : manager_(manager), hub_(hub), guard_(guard), thread_([this] { Run(); }) {}

OutputStreams::~OutputStreams() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void OutputStreams::Enqueue(std::weak_ptr<Stream> stream) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(stream));
}

void OutputStreams::Run() {
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
  while (true) {
    std::deque<std::weak_ptr<Stream>> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      batch.swap(queue_);
    }
    for (const std::weak_ptr<Stream>& weak : batch) {
      if (std::shared_ptr<Stream> stream = weak.lock()) stream->Pump();
    }
  }
}

grpc::ServerWriteReactor<v1::JobOutputChunk>* OutputStreams::Start(
    OutputKind kind, grpc::CallbackServerContext* context, const v1::JobOutputRequest* request) {
  auto stream = std::make_shared<Stream>(this, kind);
  stream->self_ = stream;
  const absl::Status status = stream->Open(context, *request);
  if (!status.ok()) {
    stream->Fail(status);
    return stream.get();
  }
  stream->Wake();
  return stream.get();
}

grpc::ServerWriteReactor<v1::JobOutputChunk>* JobServiceImpl::Metrics(
    grpc::CallbackServerContext* context, const v1::JobOutputRequest* request) {
  return output_streams_->Start(OutputKind::kMetrics, context, request);
}

grpc::ServerWriteReactor<v1::JobOutputChunk>* JobServiceImpl::Logs(
    grpc::CallbackServerContext* context, const v1::JobOutputRequest* request) {
  return output_streams_->Start(OutputKind::kLogs, context, request);
}

}  // namespace sbp::server
