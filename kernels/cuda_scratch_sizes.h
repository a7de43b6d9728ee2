// Sizes of the CUDA kernels' scratch that depend on shapes only, shared by
// the CUDA backend (which allocates it) and the memory planner (which counts
// it without CUDA). Plain C++: no CUDA headers.
#pragma once

#include <cstdint>

namespace sbp::cuda {

// Row groups of a column reduction over [rows, cols]: at least 32 rows per
// group, at most 1024 groups and 4M partial values. Depends on the shape only.
inline int ColumnGroups(int64_t rows, int64_t cols) {
  int64_t groups = (rows + 31) / 32;
  const int64_t by_size = (int64_t{4} << 20) / (cols > 0 ? cols : 1);
  if (groups > 1024) groups = 1024;
  if (groups > by_size) groups = by_size;
  return static_cast<int>(groups < 1 ? 1 : groups);
}

// Blocks of a sum of squares over n elements: at least 16Ki elements each, at
// most 1024 blocks. Depends on n only.
inline int SumSquaresBlocks(int64_t n) {
  int64_t blocks = (n + (int64_t{1} << 14) - 1) >> 14;
  if (blocks > 1024) blocks = 1024;
  return static_cast<int>(blocks < 1 ? 1 : blocks);
}

// An upper bound of the embedding backward's scratch (the exact figure,
// EmbeddingBackwardScratchBytes in launch.h, asks CUB on a device): six
// int32 arrays of `tokens` and CUB's temporary storage for a radix sort of
// (id, position) pairs, which holds the alternate key and value buffers
// (8 bytes a token) and per-tile look-back state, bounded here by another
// 16 bytes a token and 4 MiB.
inline int64_t EmbeddingBackwardScratchBound(int64_t tokens) {
  return tokens <= 0 ? 0 : 48 * tokens + (int64_t{4} << 20);
}

}  // namespace sbp::cuda
