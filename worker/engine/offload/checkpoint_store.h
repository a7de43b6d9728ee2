// Where the forward's layer inputs wait for the backward when they do not stay
// on the device (checkpoint_tier.h). The engine keeps two device slots; after
// layer l's input is complete it Puts it here (the copy runs while layer l
// computes), and in the backward it Gets layer l-1's input into the free slot
// while layer l's chunks run. Both return a ticket of the backend's transfer
// queue, which the engine waits on before it reuses or reads the slot.
//
//   host  one host buffer per stored input (backend.host_allocator(): pinned
//         on CUDA), copied to and from the slot;
//   disk  one file in `disk_dir`, stored input i at byte offset i * bytes;
//         written and read by the queue's thread straight from the slot on the
//         CPU, through two host staging buffers on CUDA. The file is unlinked
//         as soon as it is created (O_TMPFILE where the file system has it),
//         so it is gone when the store is destroyed or the process dies, and
//         its blocks are reserved up front (fallocate), so a full disk is an
//         error before the first write: STORAGE, naming the path and the
//         bytes needed.
//
// Buffers and the file are reused from pass to pass and grow when a longer
// sequence needs more room.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/transfer_queue.h"
#include "worker/engine/offload/checkpoint_tier.h"

namespace sbp {

class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;

  // Room for `count` inputs shaped like `like` (same dtype and size). Waits
  // for the queue first; keeps the room it has when that is enough.
  virtual absl::Status Reserve(int count, const Tensor& like) = 0;
  // Queues input `index` <- `slot` (device memory, read only until done).
  virtual TransferQueue::Ticket Put(int index, const Tensor& slot) = 0;
  // Queues `slot` <- input `index`.
  virtual TransferQueue::Ticket Get(int index, const Tensor& slot) = 0;

  virtual CheckpointTier tier() const = 0;
  // Bytes the store holds now: host memory (host tier, and the disk tier's
  // staging) and the file's size.
  virtual int64_t host_bytes() const = 0;
  virtual int64_t disk_bytes() const = 0;
  // Bytes of layer inputs that left the device or came back to it so far
  // (2 (L - 1) T H a pass): the queue's copies, or on the CPU, whose slots the
  // disk tier writes and reads directly, the file's reads and writes.
  virtual int64_t moved_bytes() const { return queue_->copied_bytes(); }
  TransferQueue& queue() { return *queue_; }
  const TransferQueue& queue() const { return *queue_; }

 protected:
  explicit CheckpointStore(std::unique_ptr<TransferQueue> queue) : queue_(std::move(queue)) {}
  std::unique_ptr<TransferQueue> queue_;
};

// A host store on `backend` (CheckpointTier::kHost).
std::unique_ptr<CheckpointStore> NewHostCheckpointStore(Backend& backend);

// A disk store writing into `disk_dir`, which must exist and be a writable
// directory (InvalidArgument naming it otherwise). `max_file_bytes` > 0 caps
// the file (the share of the local disk a worker allows a job): a reservation
// past it fails as the disk being full would (STORAGE, naming the bytes).
absl::StatusOr<std::unique_ptr<CheckpointStore>> NewDiskCheckpointStore(Backend& backend,
                                                                        const std::string& disk_dir,
                                                                        int64_t max_file_bytes = 0);

// The disk tier's directory checks alone (exists, is a directory, writable),
// for a job to fail on before its first step.
absl::Status CheckDiskDirectory(const std::string& disk_dir);

}  // namespace sbp
