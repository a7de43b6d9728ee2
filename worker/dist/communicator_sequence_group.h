// The engine's SequenceGroup over a Communicator that connects exactly the
// ranks sharing a sequence (ConnectSequenceGroup), with the time and bytes
// its all-to-alls took, for the step's metrics.
#pragma once

#include <cstdint>

#include "worker/dist/communicator.h"
#include "worker/engine/sequence_group.h"

namespace sbp {

class CommunicatorSequenceGroup final : public SequenceGroup {
 public:
  // `comm` must outlive this object.
  explicit CommunicatorSequenceGroup(Communicator& comm) : comm_(comm) {}

  int position() const override { return comm_.rank(); }
  int size() const override { return comm_.world_size(); }
  absl::Status AllToAll(const void* send, void* recv, int64_t block_bytes) override;
  absl::Status Sum(double* values, int64_t count) override;

  // Totals since construction: all-to-all calls, bytes sent to other ranks,
  // and wall time inside them (waiting for peers included).
  int64_t all_to_all_calls() const { return calls_; }
  int64_t all_to_all_bytes() const { return bytes_; }
  double all_to_all_seconds() const { return seconds_; }

 private:
  Communicator& comm_;
  int64_t calls_ = 0;
  int64_t bytes_ = 0;
  double seconds_ = 0;
};

}  // namespace sbp
