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

// Checks the shapes of CopyColumnBlocks (shared with the CUDA backend's
// override through the same CHECKs).
void CheckColumnBlocks(const Tensor& rows, const Tensor& blocks,
                       const std::vector<int64_t>& column_offsets, int64_t width,
                       int64_t offset_in_block) {
  CHECK(rows.rank() == 2 && blocks.rank() == 2 && rows.is_contiguous() && blocks.is_contiguous() &&
        rows.dtype() == blocks.dtype())
      << "CopyColumnBlocks: rows " << rows.DebugString() << ", blocks " << blocks.DebugString();
  CHECK_EQ(static_cast<int64_t>(column_offsets.size()), blocks.dim(0));
  CHECK(offset_in_block >= 0 && offset_in_block + rows.dim(0) * width <= blocks.dim(1))
      << "CopyColumnBlocks: an n x w region does not fit in a block of " << blocks.dim(1);
  for (int64_t c : column_offsets) CHECK(c >= 0 && c + width <= rows.dim(1));
}

void Backend::CopyColumnBlocks(const Tensor& rows, const Tensor& blocks,
                               const std::vector<int64_t>& column_offsets, int64_t width,
                               int64_t offset_in_block, bool to_blocks) {
  CHECK(rows.device().is_cpu() && blocks.device().is_cpu());
  CheckColumnBlocks(rows, blocks, column_offsets, width, offset_in_block);
  const int64_t n = rows.dim(0), columns = rows.dim(1), block = blocks.dim(1);
  const size_t element = DTypeSize(rows.dtype()), line = static_cast<size_t>(width) * element;
  auto* matrix = static_cast<char*>(rows.raw_data());
  auto* stack = static_cast<char*>(blocks.raw_data());
  for (size_t j = 0; j < column_offsets.size(); ++j) {
    char* region = stack + (static_cast<int64_t>(j) * block + offset_in_block) * element;
    for (int64_t t = 0; t < n; ++t) {
      char* row_part = matrix + (t * columns + column_offsets[j]) * element;
      char* region_row = region + t * width * element;
      if (to_blocks) {
        std::memcpy(region_row, row_part, line);
      } else {
        std::memcpy(row_part, region_row, line);
      }
    }
  }
}

}  // namespace sbp
