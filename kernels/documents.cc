#include "kernels/documents.h"

#include "common/check.h"
#include "kernels/tensor.h"

namespace sbp {

void CheckDocumentOffsets(const Tensor& offsets, int64_t rows, bool values, const char* op) {
  CHECK(offsets.defined()) << op << ": document offsets are undefined";
  CHECK(offsets.dtype() == DType::kI32 && offsets.rank() == 1 && offsets.dim(0) >= 2)
      << op << ": document offsets must be i32 [documents + 1], got " << offsets.DebugString();
  CHECK(offsets.is_contiguous()) << op << ": document offsets must be contiguous";
  if (!values) return;
  const int32_t* o = offsets.data<int32_t>();
  const int64_t n = offsets.dim(0);
  CHECK_EQ(o[0], 0) << op << ": document offsets must start at 0";
  for (int64_t i = 1; i < n; ++i) {
    CHECK_GT(o[i], o[i - 1]) << op << ": document offsets must increase, but offsets[" << i
                             << "] = " << o[i] << " follows " << o[i - 1];
  }
  CHECK_GE(o[n - 1], rows) << op << ": document offsets end at " << o[n - 1]
                           << " but the call reads rows up to " << rows;
}

}  // namespace sbp
