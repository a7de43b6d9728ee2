#include "worker/dist/data_parallel_view.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace sbp {
namespace {

absl::Status NotOnTheView(const char* what) {
  return absl::UnimplementedError(
      absl::StrCat(what, " runs on the world communicator, not on its data-parallel view"));
}

}  // namespace

DataParallelView::DataParallelView(Communicator& world, int group_size)
    : world_(world), group_size_(group_size) {
  CHECK(group_size >= 1 && world.world_size() % group_size == 0);
}

absl::Status DataParallelView::AllReduce(double* data, int64_t count, ReduceOp op) {
  if (op == ReduceOp::kSum && world_.rank() % group_size_ != 0) std::fill(data, data + count, 0.0);
  return world_.AllReduce(data, count, op);
}

absl::Status DataParallelView::ReduceScatterSum(float*, int64_t, float*, const ComputeMark*) {
  return NotOnTheView("reduce-scatter");
}
absl::Status DataParallelView::AllGather(void*, int64_t) { return NotOnTheView("all-gather"); }
absl::Status DataParallelView::AllToAll(const void*, void*, int64_t) {
  return NotOnTheView("all-to-all");
}
absl::Status DataParallelView::Broadcast(void*, int64_t, int) { return NotOnTheView("broadcast"); }

}  // namespace sbp
