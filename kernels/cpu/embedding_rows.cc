#include "kernels/cpu/embedding_rows.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "common/status_macros.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/op_checks.h"

namespace sbp::cpu {

EmbeddingRowGradient::EmbeddingRowGradient(Allocator& allocator, int64_t vocab, int64_t hidden)
    : allocator_(&allocator), vocab_(vocab), hidden_(hidden) {
  CHECK(vocab > 0 && hidden > 0) << "embedding gradient of [" << vocab << ", " << hidden << "]";
}

absl::Status EmbeddingRowGradient::Accumulate(const Tensor& ids, const Tensor& dout) {
  CheckHost(ids, DType::kI32, "ids");
  CheckHostF32(dout, "dout");
  const int64_t tokens = ids.numel();
  const int64_t H = hidden_;
  CHECK(dout.rank() >= 1 && dout.dim(-1) == H && dout.numel() == tokens * H)
      << "dout " << dout.DebugString() << " does not match ids " << ids.DebugString()
      << " and hidden size " << H;
  const int32_t* id = ids.data<int32_t>();

  // Rows seen for the first time, ascending, get the next slots.
  std::vector<int32_t> added;
  for (int64_t t = 0; t < tokens; ++t) {
    CHECK(id[t] >= 0 && id[t] < vocab_) << "token id " << id[t] << " at position " << t
                                        << " is outside the vocabulary of size " << vocab_;
    if (SlotOf(id[t]) < 0) added.push_back(id[t]);
  }
  std::sort(added.begin(), added.end());
  added.erase(std::unique(added.begin(), added.end()), added.end());
  if (!added.empty()) {
    const int64_t before = rows();
    const int64_t after = before + static_cast<int64_t>(added.size());
    if (after > capacity()) RETURN_IF_ERROR(Grow(after));
    std::memset(values_.data<float>() + before * H, 0,
                static_cast<size_t>((after - before) * H) * sizeof(float));
    std::vector<std::pair<int32_t, int32_t>> fresh;
    for (int32_t row : added) {
      fresh.emplace_back(row, static_cast<int32_t>(row_ids_.size()));
      row_ids_.push_back(row);
    }
    std::vector<std::pair<int32_t, int32_t>> merged(index_.size() + fresh.size());
    std::merge(index_.begin(), index_.end(), fresh.begin(), fresh.end(), merged.begin());
    index_ = std::move(merged);
  }
  std::vector<int32_t> slot(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) slot[t] = SlotOf(id[t]);
  if (tokens == 0) return absl::OkStatus();

  // In cpu::EmbeddingBackward's order (one summation for both).
  AccumulateRowsInOrder(dout.data<float>(), slot.data(), tokens, H, values_.data<float>());
  return absl::OkStatus();
}

void EmbeddingRowGradient::CopyRowsInto(Tensor& dense) const {
  CheckHostF32(dense, "dense");
  CHECK_GE(dense.numel(), vocab_ * hidden_)
      << "dense " << dense.DebugString() << " cannot hold [" << vocab_ << ", " << hidden_ << "]";
  if (row_ids_.empty()) return;
  const int64_t n = rows();
  const int64_t H = hidden_;
  const float* src = values_.data<float>();
  float* dst = dense.data<float>();
#pragma omp parallel for schedule(static) if (n * H >= kParallelMinElements)
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(dst + static_cast<int64_t>(row_ids_[r]) * H, src + r * H,
                static_cast<size_t>(H) * sizeof(float));
  }
}

int32_t EmbeddingRowGradient::SlotOf(int32_t row) const {
  auto it = std::lower_bound(index_.begin(), index_.end(), std::make_pair(row, INT32_MIN));
  return it != index_.end() && it->first == row ? it->second : -1;
}

absl::Status EmbeddingRowGradient::Grow(int64_t rows_wanted) {
  // Old rows copied; the caller zeroes the new ones.
  ASSIGN_OR_RETURN(Tensor grown, Tensor::Empty(*allocator_, {rows_wanted, hidden_}, DType::kF32,
                                               "embedding row gradient"));
  if (rows() > 0) {
    std::memcpy(grown.data<float>(), values_.data<float>(),
                static_cast<size_t>(rows() * hidden_) * sizeof(float));
  }
  values_ = std::move(grown);
  return absl::OkStatus();
}

absl::Status EmbeddingRowGradient::Reserve(int64_t capacity) {
  CHECK(capacity >= 0 && capacity <= vocab_)
      << "embedding row gradient: capacity " << capacity << " outside [0, " << vocab_ << "]";
  reserved_ = std::max(capacity, rows());
  if (reserved_ > this->capacity()) return Grow(reserved_);
  return absl::OkStatus();
}

Tensor EmbeddingRowGradient::values() const {
  if (!values_.defined()) return Tensor();
  return values_.Rows(0, rows());
}

void EmbeddingRowGradient::Clear() {
  row_ids_.clear();
  index_.clear();
  if (reserved_ == 0) values_ = Tensor();  // reserved room stays
}

}  // namespace sbp::cpu
