// The gradient of an embedding table [V, H] kept as the rows a step's tokens
// touched (CPU, fp32), instead of a dense V x H buffer of which at most T
// rows are non-zero.
//
//   Accumulate(ids, dout):  rows[ids[t]] += dout[t]   for t = 0, 1, ... in order
//
// A row enters the set at 0.0f the first time an id names it, so every
// element is 0.0f + dout[t0] + dout[t1] + ... over its tokens in token order
// (and micro-batch after micro-batch): the very sum the dense scatter-add
// (cpu::EmbeddingBackward into a zeroed table) computes, bit for bit. The
// parallel split is over columns, as in the dense kernel, so the result does
// not depend on the thread count.
//
// The values live in one [rows, H] f32 buffer from the allocator (charged to
// its peak); a call that brings new rows reallocates it to the exact new
// size and appends them in ascending row order. The row index (sorted
// (row, slot) pairs, one a stored row) stays in ordinary host memory.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/allocator.h"
#include "kernels/tensor.h"

namespace sbp::cpu {

class EmbeddingRowGradient {
 public:
  EmbeddingRowGradient(Allocator& allocator, int64_t vocab, int64_t hidden);

  // ids [T] i32 (any shape with T elements), dout [T, H] f32. An id outside
  // [0, V) is a CHECK failure, as in the dense kernel. Fails (and changes
  // nothing) when the allocator cannot hold the grown buffer.
  absl::Status Accumulate(const Tensor& ids, const Tensor& dout);

  // dense[row, :] = this row's values for every row in the set; the other
  // rows of `dense` ([V, H] f32, or [>= V*H] flat) are not written. Into a
  // zeroed table this is the dense kernel's result.
  void CopyRowsInto(Tensor& dense) const;

  // Empties the set and releases the values.
  void Clear();

  int64_t vocab() const { return vocab_; }
  int64_t hidden() const { return hidden_; }
  int64_t rows() const { return static_cast<int64_t>(row_ids_.size()); }
  // The table row of each stored row (in slot order).
  const std::vector<int32_t>& row_ids() const { return row_ids_; }
  // [rows, H] f32 (undefined while the set is empty).
  const Tensor& values() const { return values_; }

 private:
  Allocator* allocator_;
  int64_t vocab_;
  int64_t hidden_;
  // The slot of `row`, or -1.
  int32_t SlotOf(int32_t row) const;

  std::vector<int32_t> row_ids_;
  std::vector<std::pair<int32_t, int32_t>> index_;  // (row, slot), sorted by row
  Tensor values_;
};

}  // namespace sbp::cpu
