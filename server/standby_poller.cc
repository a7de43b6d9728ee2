#include "server/standby_poller.h"

#include <chrono>

namespace sbp::server {

StandbyPoller::StandbyPoller()
    : thread_([this] {
        void* tag = nullptr;
        bool ok = false;
        while (queue_.AsyncNext(&tag, &ok,
                                std::chrono::system_clock::now() + std::chrono::seconds(1)) !=
               grpc::CompletionQueue::SHUTDOWN) {
        }
      }) {}

StandbyPoller::~StandbyPoller() {
  queue_.Shutdown();
  thread_.join();
}

}  // namespace sbp::server
