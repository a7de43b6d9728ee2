// A thread that keeps gRPC's shared poller busy while the server is idle.
//
// gRPC 1.51 (Debian 12's) runs the callback API (our Watch streams and the
// grpc.health.v1 service) on two or more "nexting" threads. Each waits on the
// callback queue for at most 1 s; when it times out it *sleeps* 100 ms before
// waiting again. With no callback traffic the threads time out together, and
// when the thread that was polling the process-wide epoll set goes to sleep no
// other waiter takes the role over: every request that arrives in the next
// 100 ms, sync ones such as Heartbeat included, waits for the sleep to end.
// That is a ~100 ms stall every 1.1 s, ~1% of heartbeats at 80-100 ms
// (BENCHMARKS.md, control plane at scale).
//
// A thread that is always inside CompletionQueue::AsyncNext on an empty queue
// closes the gap: when no other thread is polling it becomes the poller, and it
// re-enters at once after each 1 s deadline. It costs one wake-up a second.
#ifndef SBP_SERVER_STANDBY_POLLER_H_
#define SBP_SERVER_STANDBY_POLLER_H_

#include <grpcpp/completion_queue.h>

#include <thread>

namespace sbp::server {

class StandbyPoller {
 public:
  StandbyPoller();
  ~StandbyPoller();  // shuts the queue down and joins the thread
  StandbyPoller(const StandbyPoller&) = delete;
  StandbyPoller& operator=(const StandbyPoller&) = delete;

 private:
  grpc::CompletionQueue queue_;  // never gets a tag: only its deadline wakes it
  std::thread thread_;
};

}  // namespace sbp::server

#endif  // SBP_SERVER_STANDBY_POLLER_H_
