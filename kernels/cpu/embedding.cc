#include "kernels/cpu/embedding.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/op_checks.h"

namespace sbp::cpu {
namespace {

// Checks the layout of (ids, table-like [V, H], rows [T, H]) and every id.
void CheckEmbeddingArgs(const Tensor& table, const Tensor& ids, const Tensor& rows,
                        const char* table_name, const char* rows_name) {
  CheckHost(table, DType::kF32, table_name);
  CheckHost(ids, DType::kI32, "ids");
  CheckHost(rows, DType::kF32, rows_name);
  CHECK_EQ(table.rank(), 2) << table_name << " must be [V, H], got " << table.DebugString();
  const int64_t vocab = table.dim(0);
  const int64_t hidden = table.dim(1);
  CHECK(rows.rank() >= 1 && rows.dim(-1) == hidden && rows.numel() == ids.numel() * hidden)
      << rows_name << " " << rows.DebugString() << " does not match ids " << ids.DebugString()
      << " and " << table_name << " " << table.DebugString();
  const int32_t* id = ids.data<int32_t>();
  for (int64_t t = 0; t < ids.numel(); ++t) {
    CHECK(id[t] >= 0 && id[t] < vocab) << "token id " << id[t] << " at position " << t
                                       << " is outside the vocabulary of size " << vocab;
  }
}

}  // namespace

void EmbeddingForward(const Tensor& table, const Tensor& ids, Tensor& out) {
  CheckEmbeddingArgs(table, ids, out, "table", "out");
  const int64_t tokens = ids.numel();
  const int64_t hidden = table.dim(1);
  const float* src = table.data<float>();
  const int32_t* id = ids.data<int32_t>();
  float* dst = out.data<float>();
#pragma omp parallel for schedule(static) if (tokens * hidden >= kParallelMinElements)
  for (int64_t t = 0; t < tokens; ++t) {
    std::memcpy(dst + t * hidden, src + static_cast<int64_t>(id[t]) * hidden,
                static_cast<size_t>(hidden) * sizeof(float));
  }
}

void EmbeddingBackward(const Tensor& ids, const Tensor& dout, Tensor& dtable) {
  CheckEmbeddingArgs(dtable, ids, dout, "dtable", "dout");
  const int64_t tokens = ids.numel();
  const int64_t hidden = dtable.dim(1);
  AccumulateRowsInOrder(dout.data<float>(), ids.data<int32_t>(), tokens, hidden,
                        dtable.data<float>());
}

void AccumulateRowsInOrder(const float* dout, const int32_t* rows, int64_t tokens, int64_t hidden,
                           float* acc) {
#pragma omp parallel if (tokens * hidden >= kParallelMinElements)
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t width = (hidden + threads * 16 - 1) / (threads * 16) * 16;
    const int64_t c0 = std::min(hidden, omp_get_thread_num() * width);
    const int64_t c1 = std::min(hidden, c0 + width);
    if (c0 < c1) {
      for (int64_t t = 0; t < tokens; ++t) {
        const float* src = dout + t * hidden;
        float* dst = acc + static_cast<int64_t>(rows[t]) * hidden;
        for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
      }
    }
  }
}

}  // namespace sbp::cpu
