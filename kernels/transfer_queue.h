// Copies between a backend's device memory and host memory that run beside
// the compute (the memory tiers: layer checkpoints and optimizer state moved
// off the device). Items run in the order they were queued, one at a time, on
// a queue of their own: a CUDA copy stream driven by a host thread, or on the
// CPU a host thread that copies with memcpy.
//
// Ordering. A Copy starts only after every backend op issued before it was
// queued (CUDA: the copy stream waits on an event recorded on the compute
// stream at that moment). Ops issued later do not wait for it unless told:
// WaitInCompute(t) orders every later op after item t; WaitOnHost(t) blocks
// the calling thread. Items may be file reads and writes (Run), which run on
// the queue's thread after every earlier item has finished, copies included.
//
// Failures. An item that fails (a file write that finds the disk full) makes
// its ticket and every later one fail with its status; the queue is then
// broken and runs nothing more.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace sbp {

class Backend;

class TransferQueue {
 public:
  using Ticket = int64_t;  // 1, 2, ... in queue order; 0 is "nothing", always done

  virtual ~TransferQueue() = default;

  // dst = src: equal byte sizes; one side host memory, the other the backend's
  // device (on the CPU both are host memory). Neither may be touched by the
  // caller until the ticket is waited for (src may be read).
  virtual Ticket Copy(const Tensor& src, const Tensor& dst) = 0;
  // Runs `work` on the queue's thread once every earlier item is done.
  virtual Ticket Run(std::function<absl::Status()> work) = 0;

  // Backend ops issued after this call start once item `t` is done (CUDA: the
  // compute stream waits on the copy's event; the CPU: the caller waits).
  virtual absl::Status WaitInCompute(Ticket t) = 0;
  // The calling thread waits for item `t`.
  virtual absl::Status WaitOnHost(Ticket t) = 0;
  // Waits for every item queued so far.
  absl::Status Drain() { return WaitOnHost(last_ticket()); }

  virtual Ticket last_ticket() const = 0;
  // Bytes moved by Copy items so far, and seconds callers spent blocked in
  // WaitOnHost / WaitInCompute (the time the compute waited for a copy).
  virtual int64_t copied_bytes() const = 0;
  virtual double wait_seconds() const = 0;
  // Seconds the queue spent running items (copies and file I/O): with
  // copied_bytes, the rate the copies ran at.
  virtual double busy_seconds() const = 0;
};

// The queue's thread and bookkeeping. Subclasses say how a copy item runs
// (the CPU: memcpy; CUDA: an async copy on a stream of its own, waited for).
class ThreadTransferQueue : public TransferQueue {
 public:
  ThreadTransferQueue();
  ~ThreadTransferQueue() override;  // waits for the items queued so far

  Ticket Copy(const Tensor& src, const Tensor& dst) override;
  Ticket Run(std::function<absl::Status()> work) override;
  absl::Status WaitInCompute(Ticket t) override { return WaitOnHost(t); }
  absl::Status WaitOnHost(Ticket t) override;
  Ticket last_ticket() const override;
  int64_t copied_bytes() const override;
  double wait_seconds() const override;
  double busy_seconds() const override;

 protected:
  // Called on the caller's thread when a copy is queued (CUDA records an
  // event on the compute stream here), and on the queue's thread to perform
  // it: returns once dst holds the data.
  virtual void BeforeCopyQueued(Ticket t) {}
  virtual absl::Status PerformCopy(Ticket t, const Tensor& src, const Tensor& dst);
  // Subclasses whose PerformCopy reads state set by BeforeCopyQueued call
  // this in their destructor, so that no item runs on a half-destroyed object.
  void StopThread();

 private:
  struct State;
  Ticket Enqueue(std::function<absl::Status(Ticket)> item);
  void Loop();
  std::unique_ptr<State> state_;
};

// The CPU backend's queue: copies are memcpy on the queue's thread.
std::unique_ptr<TransferQueue> NewHostTransferQueue();

}  // namespace sbp
