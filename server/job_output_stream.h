// JobService.Metrics and JobService.Logs (proto/streambp/v1/job_output.proto):
// a job's stored lines page by page, then, when following, each new page as
// workers append it, until the job has ended. Each call is a callback stream,
// so that a following client holds no server thread (server/rpc_guard.h), and
// counts against the same stream caps as Watch. One fan-out thread reads the
// pages: a stream is queued there when it opens, when a write completes, when
// lines of its job were stored (OutputHub) and when its job changed
// (WatchHub: the end of the job ends the stream).
#pragma once

#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/job_manager.h"
#include "server/job_output.h"
#include "server/rpc_guard.h"
#include "server/watch_hub.h"
#include "streambp/v1/jobs.grpc.pb.h"

namespace sbp::server {

class OutputStreams {
 public:
  OutputStreams(JobManager* manager, WatchHub* hub, const RpcGuard* guard);
  ~OutputStreams();  // stops the fan-out thread
  OutputStreams(const OutputStreams&) = delete;
  OutputStreams& operator=(const OutputStreams&) = delete;

  // A new stream of `kind` for the call; it ends itself.
  grpc::ServerWriteReactor<streambp::v1::JobOutputChunk>* Start(
      OutputKind kind, grpc::CallbackServerContext* context,
      const streambp::v1::JobOutputRequest* request);

  class Stream;

 private:
  friend class Stream;
  void Enqueue(std::weak_ptr<Stream> stream);
  void Run();

  JobManager* const manager_;
  WatchHub* const hub_;
  const RpcGuard* const guard_;
  absl::Mutex mu_;
  std::deque<std::weak_ptr<Stream>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sbp::server
