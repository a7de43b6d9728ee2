#include "kernels/backend.h"

#include <cstring>

namespace sbp {

void Backend::Copy(const Tensor& src, Tensor& dst) {
  CHECK(src.device().is_cpu() && dst.device().is_cpu())
      << "Copy from " << src.DebugString() << " to " << dst.DebugString()
      << ": this backend only copies host memory";
  CHECK(src.is_contiguous() && dst.is_contiguous() && src.shape() == dst.shape() &&
        src.dtype() == dst.dtype())
      << "Copy from " << src.DebugString() << " to " << dst.DebugString()
      << ": needs equal shapes and dtypes, contiguous";
  if (src.raw_data() != dst.raw_data()) std::memmove(dst.raw_data(), src.raw_data(), src.nbytes());
}

}  // namespace sbp
