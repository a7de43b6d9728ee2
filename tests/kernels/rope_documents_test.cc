// RoPE over packed documents (kernels/documents.h): every document's rows
// restart at position 0, in any chunking of the sequence, bit for bit equal
// to rotating each document on its own; backward is the transposed map.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/allocator.h"
#include "kernels/cpu/rope.h"
#include "kernels/random.h"
#include "kernels/rope_table.h"
#include "kernels/tensor.h"

namespace sbp {
namespace {

CpuAllocator& Alloc() {
  static CpuAllocator* alloc = new CpuAllocator();
  return *alloc;
}

Tensor Normal(Shape shape, uint64_t seed) {
  auto t = Tensor::Zeros(Alloc(), std::move(shape), DType::kF32, "test tensor");
  CHECK_OK(t.status());
  FillNormal(*t, seed, 0.0f, 1.0f);
  return *std::move(t);
}

Tensor Clone(const Tensor& x) {
  auto t = Tensor::Zeros(Alloc(), x.shape(), DType::kF32, "clone");
  CHECK_OK(t.status());
  std::memcpy(t->data<float>(), x.data<float>(), x.nbytes());
  return *std::move(t);
}

bool Same(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(RopeDocumentsTest, PositionsRestartPerDocumentInEveryChunking) {
  std::vector<int32_t> offsets = {0, 5, 6, 19, 40};
  const Tensor offsets_t = Tensor::Wrap(offsets.data(), {5}, DType::kI32);
  const RopeTable table = PlainRopeTable(8, 10000.0);
  const Tensor x = Normal({40, 3, 8}, 7);
  // Each document alone, from position 0.
  Tensor expected = Clone(x);
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    Tensor doc = expected.Rows(offsets[i], offsets[i + 1]);
    cpu::RopeForward(doc, 0, table);
  }
  for (int64_t chunk : {40, 7, 1}) {
    Tensor packed = Clone(x);
    for (int64_t s = 0; s < 40; s += chunk) {
      Tensor rows = packed.Rows(s, std::min<int64_t>(40, s + chunk));
      cpu::RopeForward(rows, s, table, &offsets_t);
    }
    EXPECT_TRUE(Same(packed, expected)) << "chunk " << chunk;
    for (int64_t s = 0; s < 40; s += chunk) {
      Tensor rows = packed.Rows(s, std::min<int64_t>(40, s + chunk));
      cpu::RopeBackward(rows, s, table, &offsets_t);
    }
    double max_err = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      max_err = std::max(max_err, std::abs(double{packed.data<float>()[i]} - x.data<float>()[i]));
    }
    EXPECT_LT(max_err, 1e-5) << "backward undoes forward, chunk " << chunk;
  }
}

TEST(RopeDocumentsTest, OneDocumentIsPlainRope) {
  std::vector<int32_t> offsets = {0, 16};
  const Tensor offsets_t = Tensor::Wrap(offsets.data(), {2}, DType::kI32);
  const RopeTable table = PlainRopeTable(4, 100.0);
  Tensor a = Normal({16, 2, 4}, 3), b = Clone(a);
  cpu::RopeForward(a, 0, table, &offsets_t);
  cpu::RopeForward(b, 0, table);
  EXPECT_TRUE(Same(a, b));
}

TEST(RopeDocumentsDeathTest, RejectsOffsetsShorterThanTheRows) {
  std::vector<int32_t> offsets = {0, 4};
  const Tensor offsets_t = Tensor::Wrap(offsets.data(), {2}, DType::kI32);
  Tensor x = Normal({4, 1, 4}, 1);
  EXPECT_DEATH(cpu::RopeForward(x, 2, PlainRopeTable(4, 100.0), &offsets_t), "rows up to 6");
}

}  // namespace
}  // namespace sbp
