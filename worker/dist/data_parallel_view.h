// The world's communicator as the data-parallel ranks see it under
// sequence parallelism: the P ranks of a sequence group hold the same
// sequences and report the same step figures (the engine returns each
// sequence's whole loss on every rank of its group), so the group counts
// once. rank() and world_size() are the group's index and the number of
// groups (which examples a rank takes); AllReduce sums only the group
// leaders' values (position 0; the others add zeros) and takes the maximum
// over every rank. The other collectives belong to the world communicator
// and are refused here.
#pragma once

#include "worker/dist/communicator.h"

namespace sbp {

class DataParallelView final : public Communicator {
 public:
  // `world` must outlive the view; `group_size` divides its world size.
  DataParallelView(Communicator& world, int group_size);

  int rank() const override { return world_.rank() / group_size_; }
  int world_size() const override { return world_.world_size() / group_size_; }
  absl::Status AllReduce(double* data, int64_t count, ReduceOp op) override;
  absl::Status Barrier() override { return world_.Barrier(); }
  absl::Status ReduceScatterSum(float*, int64_t, float*, const ComputeMark*) override;
  absl::Status AllGather(void*, int64_t) override;
  absl::Status AllToAll(const void*, void*, int64_t) override;
  absl::Status Broadcast(void*, int64_t, int) override;

 private:
  Communicator& world_;
  const int group_size_;
};

}  // namespace sbp
