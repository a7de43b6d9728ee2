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
// The values live in one f32 buffer from the allocator (charged to its
// peak), [capacity, H] of which the first `rows` are used. New rows are
// appended in ascending row order. Reserve(capacity) allocates it once, at
// an upper bound of the rows a step can bring (its token count), so that its
// size is known before the step; a call that would pass the capacity
// reallocates it to the exact new size. The row index (sorted (row, slot)
// pairs, one a stored row) stays in ordinary host memory.
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

  // Allocates room for `capacity` rows at once (at most V; not below the
  // rows held). Fails when the allocator cannot hold it.
  absl::Status Reserve(int64_t capacity);

  // Empties the set; reserved room (grown, if a step outgrew it) is kept,
  // an unreserved buffer released.
  void Clear();

  int64_t vocab() const { return vocab_; }
  int64_t hidden() const { return hidden_; }
  int64_t rows() const { return static_cast<int64_t>(row_ids_.size()); }
  int64_t capacity() const { return values_.defined() ? values_.dim(0) : 0; }
  int64_t reserved() const { return reserved_; }
  // The table row of each stored row (in slot order).
  const std::vector<int32_t>& row_ids() const { return row_ids_; }
  // (row, slot) of every stored row, in ascending row order.
  const std::vector<std::pair<int32_t, int32_t>>& sorted_rows() const { return index_; }
  // Slot s's values at values_data() + s * hidden() (null while nothing is
  // held or reserved).
  const float* values_data() const { return values_.defined() ? values_.data<float>() : nullptr; }
  // [rows, H] f32 (undefined while nothing is held or reserved).
  Tensor values() const;

 private:
  Allocator* allocator_;
  int64_t vocab_;
  int64_t hidden_;
  // The slot of `row`, or -1.
  int32_t SlotOf(int32_t row) const;
  // Makes room for `rows` rows, keeping the rows held.
  absl::Status Grow(int64_t rows);

  std::vector<int32_t> row_ids_;
  std::vector<std::pair<int32_t, int32_t>> index_;  // (row, slot), sorted by row
  Tensor values_;                                   // [capacity, H]
  int64_t reserved_ = 0;
};

}  // namespace sbp::cpu
