#include "kernels/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/tensor.h"

namespace sbp {
namespace {

TEST(CpuAllocator, TracksCurrentAndPeakInRoundedBytes) {
  CpuAllocator alloc;
  {
    auto a = alloc.Allocate(100, "a");
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*a)->data()) % 64, 0u);
    EXPECT_EQ(alloc.current_bytes(), 128);
    auto b = alloc.Allocate(64, "b");
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(alloc.current_bytes(), 192);
  }
  EXPECT_EQ(alloc.current_bytes(), 0);
  EXPECT_EQ(alloc.peak_bytes(), 192);
  alloc.ResetPeak();
  EXPECT_EQ(alloc.peak_bytes(), 0);
}

TEST(CpuAllocator, BudgetReturnsResourceExhaustedWithFigures) {
  CpuAllocator alloc;
  alloc.set_budget_bytes(1 << 20);
  auto held = alloc.Allocate(900 * 1024, "weights");
  ASSERT_TRUE(held.ok());
  auto over = alloc.Allocate(200 * 1024, "layer 3 K buffer");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(over.status().message());
  EXPECT_NE(msg.find("layer 3 K buffer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("200.0 KiB"), std::string::npos) << msg;  // the request
  EXPECT_NE(msg.find("900.0 KiB"), std::string::npos) << msg;  // current use
  EXPECT_NE(msg.find("1.0 MiB"), std::string::npos) << msg;    // the budget
  // A failed request changes nothing.
  EXPECT_EQ(alloc.current_bytes(), 900 * 1024);
  EXPECT_EQ(alloc.peak_bytes(), 900 * 1024);
  // Exactly at the budget is allowed.
  auto fits = alloc.Allocate(124 * 1024, "fits");
  EXPECT_TRUE(fits.ok());
}

TEST(CpuAllocator, ARequestTheSystemRefusesIsNotAPeak) {
  CpuAllocator alloc;
  auto held = alloc.Allocate(1 << 20, "weights");
  ASSERT_TRUE(held.ok());
  const int64_t before = alloc.peak_bytes();
  // No budget: the operating system refuses 1 PiB of address space.
  auto huge = alloc.Allocate(size_t{1} << 50, "huge");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("'huge'"), std::string::npos) << huge.status();
  EXPECT_EQ(alloc.current_bytes(), before);
  EXPECT_EQ(alloc.peak_bytes(), before);
}

TEST(ScopedPeakReset, MeasuresOnePhaseAndRestoresTheOverallPeak) {
  CpuAllocator alloc;
  { auto big = alloc.Allocate(1 << 20, "big"); }
  auto base = alloc.Allocate(1024, "base");
  {
    ScopedPeakReset phase(alloc);
    EXPECT_EQ(phase.start_bytes(), 1024);
    auto t = alloc.Allocate(4096, "t");
    EXPECT_EQ(phase.phase_peak_bytes(), 1024 + 4096);
  }
  EXPECT_EQ(alloc.peak_bytes(), 1 << 20);
}

TEST(Tensor, RowsAreViewsAndReshapeKeepsData) {
  CpuAllocator alloc;
  auto t = Tensor::Zeros(alloc, {6, 4}, DType::kF32, "t");
  ASSERT_TRUE(t.ok());
  for (int i = 0; i < 24; ++i) t->data<float>()[i] = static_cast<float>(i);
  Tensor rows = t->Rows(2, 5);
  EXPECT_EQ(rows.shape(), (Shape{3, 4}));
  EXPECT_EQ(rows.data<float>()[0], 8.0f);
  rows.data<float>()[1] = -1.0f;
  EXPECT_EQ(t->data<float>()[9], -1.0f);
  EXPECT_EQ(alloc.current_bytes(), 128);  // the view allocated nothing
  Tensor r = t->Reshape({3, 2, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 2, 4}));
  EXPECT_EQ(r.Flatten2D().shape(), (Shape{3, 8}));
  EXPECT_EQ(t->DebugString(), "f32[6, 4]@cpu");
}

TEST(Tensor, BufferOutlivesTheOriginalTensor) {
  CpuAllocator alloc;
  Tensor view;
  {
    auto t = Tensor::Zeros(alloc, {4, 4}, DType::kF32);
    view = t->Rows(1, 2);
  }
  EXPECT_EQ(alloc.current_bytes(), 64);
  view = Tensor();
  EXPECT_EQ(alloc.current_bytes(), 0);
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f)), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
}

}  // namespace
}  // namespace sbp
