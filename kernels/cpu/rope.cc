#include "kernels/cpu/rope.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/documents.h"

namespace sbp::cpu {
namespace {

constexpr int64_t kParallelMinElements = 1 << 14;

// Applies (c, sign * s) to every head of every row of x: sign 1 rotates
// forward, -1 applies the transpose.
void Rotate(Tensor& x, int64_t position_offset, const RopeTable& rope, const Tensor* doc_offsets,
            double sign, const char* name) {
  CHECK(x.defined()) << name << " is undefined";
  CHECK(x.device().is_cpu()) << name << " must be on the cpu, got " << x.DebugString();
  CHECK(x.dtype() == DType::kF32) << name << " must be f32, got " << x.DebugString();
  CHECK(x.is_contiguous()) << name << " must be contiguous, got " << x.DebugString();
  CHECK(x.rank() == 3 && x.dim(2) % 2 == 0 && x.dim(2) > 0)
      << name << " must be [T, H, head_dim] with an even head_dim, got " << x.DebugString();
  CHECK_EQ(x.dim(2), rope.head_dim())
      << name << " " << x.DebugString() << " does not match a rope table of head_dim "
      << rope.head_dim();
  CHECK_GE(position_offset, 0) << "negative rope position offset";
  const int64_t rows = x.dim(0);
  const int32_t* docs = nullptr;
  int64_t n_docs = 0;
  if (doc_offsets != nullptr) {
    CHECK(doc_offsets->device().is_cpu()) << "rope: document offsets must be on the cpu";
    CheckDocumentOffsets(*doc_offsets, position_offset + rows, /*values=*/true, "rope");
    docs = doc_offsets->data<int32_t>();
    n_docs = doc_offsets->dim(0);
  }
  const int64_t heads = x.dim(1);
  const int64_t d = x.dim(2);
  const int64_t half = d / 2;
  const std::vector<double>& inv_freq = rope.inv_freq;
  const double cos_scale = rope.attention_scaling;
  const double sin_scale = sign * rope.attention_scaling;
  float* data = x.data<float>();
#pragma omp parallel if (rows * heads * d >= kParallelMinElements)
  {
    std::vector<float> cos_row(static_cast<size_t>(half));
    std::vector<float> sin_row(static_cast<size_t>(half));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < rows; ++t) {
      const int64_t row = position_offset + t;
      const int64_t start = docs != nullptr ? DocumentStart(docs, n_docs, row) : 0;
      const double position = static_cast<double>(row - start);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = position * inv_freq[i];
        cos_row[i] = static_cast<float>(cos_scale * std::cos(angle));
        sin_row[i] = static_cast<float>(sin_scale * std::sin(angle));
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* x1 = data + (t * heads + h) * d;
        float* x2 = x1 + half;
        for (int64_t i = 0; i < half; ++i) {
          const float a = x1[i], b = x2[i];
          x1[i] = a * cos_row[i] - b * sin_row[i];
          x2[i] = b * cos_row[i] + a * sin_row[i];
        }
      }
    }
  }
}

}  // namespace

void RopeForward(Tensor& x, int64_t position_offset, const RopeTable& rope,
                 const Tensor* doc_offsets) {
  Rotate(x, position_offset, rope, doc_offsets, 1.0, "x");
}

void RopeBackward(Tensor& dx, int64_t position_offset, const RopeTable& rope,
                  const Tensor* doc_offsets) {
  Rotate(dx, position_offset, rope, doc_offsets, -1.0, "dx");
}

}  // namespace sbp::cpu
