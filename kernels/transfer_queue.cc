#include "kernels/transfer_queue.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace sbp {

struct ThreadTransferQueue::State {
  std::mutex mu;
  std::condition_variable changed;
  std::deque<std::pair<Ticket, std::function<absl::Status(Ticket)>>> items;
  Ticket queued = 0;     // last ticket handed out
  Ticket done = 0;       // every ticket <= done has run
  absl::Status failure;  // the first item's failure; later items are skipped
  bool stopping = false;
  int64_t copied_bytes = 0;
  double wait_seconds = 0;
  double busy_seconds = 0;
  std::thread thread;
};

ThreadTransferQueue::ThreadTransferQueue() : state_(std::make_unique<State>()) {
  state_->thread = std::thread([this] { Loop(); });
}

ThreadTransferQueue::~ThreadTransferQueue() { StopThread(); }

void ThreadTransferQueue::StopThread() {
  if (!state_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopping = true;
  }
  state_->changed.notify_all();
  state_->thread.join();
}

void ThreadTransferQueue::Loop() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  while (true) {
    s.changed.wait(lock, [&] { return s.stopping || !s.items.empty(); });
    if (s.items.empty()) return;  // stopping, with everything run
    auto [ticket, item] = std::move(s.items.front());
    s.items.pop_front();
    const bool skip = !s.failure.ok();
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = skip ? absl::OkStatus() : item(ticket);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    lock.lock();
    s.busy_seconds += seconds;
    if (!status.ok() && s.failure.ok()) s.failure = std::move(status);
    s.done = ticket;
    s.changed.notify_all();
  }
}

TransferQueue::Ticket ThreadTransferQueue::Enqueue(std::function<absl::Status(Ticket)> item) {
  State& s = *state_;
  Ticket ticket;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ticket = ++s.queued;
    s.items.emplace_back(ticket, std::move(item));
  }
  s.changed.notify_all();
  return ticket;
}

TransferQueue::Ticket ThreadTransferQueue::Copy(const Tensor& src, const Tensor& dst) {
  CHECK_EQ(src.nbytes(), dst.nbytes())
      << "transfer from " << src.DebugString() << " to " << dst.DebugString();
  Ticket next;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    next = state_->queued + 1;
    state_->copied_bytes += static_cast<int64_t>(src.nbytes());
  }
  BeforeCopyQueued(next);
  const Ticket ticket = Enqueue([this, src, dst](Ticket t) { return PerformCopy(t, src, dst); });
  CHECK_EQ(ticket, next) << "a TransferQueue is filled from one thread";
  return ticket;
}

TransferQueue::Ticket ThreadTransferQueue::Run(std::function<absl::Status()> work) {
  return Enqueue([work = std::move(work)](Ticket) { return work(); });
}

absl::Status ThreadTransferQueue::PerformCopy(Ticket, const Tensor& src, const Tensor& dst) {
  if (src.nbytes() > 0) std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
  return absl::OkStatus();
}

absl::Status ThreadTransferQueue::WaitOnHost(Ticket t) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  CHECK_LE(t, s.queued) << "waiting for a transfer that was never queued";
  if (s.done < t) {
    const auto start = std::chrono::steady_clock::now();
    s.changed.wait(lock, [&] { return s.done >= t; });
    s.wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return s.failure;
}

TransferQueue::Ticket ThreadTransferQueue::last_ticket() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->queued;
}

int64_t ThreadTransferQueue::copied_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->copied_bytes;
}

double ThreadTransferQueue::wait_seconds() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->wait_seconds;
}

double ThreadTransferQueue::busy_seconds() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->busy_seconds;
}

std::unique_ptr<TransferQueue> NewHostTransferQueue() {
  return std::make_unique<ThreadTransferQueue>();
}

}  // namespace sbp
