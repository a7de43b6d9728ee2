// The CUDA allocator's contract (kernels/allocator.h: current, peak, budget,
// ResourceExhausted with figures), host <-> device copies, and StreamBP's
// use of attention on the device: query chunks run one after the other with
// dk/dv accumulating equal one call over all queries. Skipped without CUDA
// or a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/compute_device.h"
#include "kernels/cpu/attention.h"
#include "kernels/device_info.h"
#include "kernels/matmul_peak.h"
#include "tests/kernels/backend_test_util.h"

namespace sbp {
namespace {

using op_test::RandomTensor;
using op_test::RelErr;

class CudaRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (" << CudaSupportSummary() << ")";
  }

  ComputeDevice Open(DType dtype) {
    auto device = OpenComputeDevice("cuda:0", dtype);
    CHECK_OK(device.status());
    return *std::move(device);
  }

  // A device copy of a host tensor, in `dtype`.
  static Tensor ToDevice(Backend& b, const Tensor& host, DType dtype) {
    Tensor staged = host;
    if (dtype != host.dtype()) {
      staged = op_test::NewTensor(host.shape(), dtype);
      cpu::Cast(host, staged);
    }
    auto t = Tensor::Empty(b.allocator(), host.shape(), dtype, "test");
    CHECK_OK(t.status());
    b.Copy(staged, *t);
    return *t;
  }
};

TEST_F(CudaRuntimeTest, AllocatorTracksCurrentPeakAndBudget) {
  ComputeDevice dev = Open(DType::kBF16);
  Allocator& a = *dev.allocator;
  EXPECT_EQ(a.device(), Device::Cuda(0));
  EXPECT_EQ(a.RoundedSize(1), 256u);
  EXPECT_EQ(a.RoundedSize(257), 512u);
  const int64_t base = a.current_bytes();  // the backend's cuBLAS workspace
  {
    auto t = Tensor::Empty(a, {1000}, DType::kF32, "t");
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->device(), Device::Cuda(0));
    EXPECT_EQ(a.current_bytes(), base + 4096);
    EXPECT_GE(a.peak_bytes(), base + 4096);
  }
  EXPECT_EQ(a.current_bytes(), base);
  a.ResetPeak();
  a.set_budget_bytes(base + (int64_t{1} << 20));
  auto big = Tensor::Empty(a, {int64_t{1} << 20}, DType::kF32, "layer 3 K buffer");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(big.status().message());
  EXPECT_NE(message.find("layer 3 K buffer"), std::string::npos) << message;
  EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
  EXPECT_NE(message.find("budget"), std::string::npos) << message;
  EXPECT_EQ(a.current_bytes(), base);
  EXPECT_EQ(a.peak_bytes(), base);
  a.set_budget_bytes(0);
}

// A GPU worker budgets the free memory at start less the reserve, never the total.
TEST_F(CudaRuntimeTest, WorkerBudgetIsFreeMemoryLessTheReserve) {
  ComputeDevice dev = Open(DType::kBF16);
  auto before = QueryDeviceMemory(Device::Cuda(0));
  ASSERT_TRUE(before.ok()) << before.status();
  auto budget = DeviceMemoryBudgetBytes(Device::Cuda(0));
  ASSERT_TRUE(budget.ok()) << budget.status();
  auto after = QueryDeviceMemory(Device::Cuda(0));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GT(*budget, 0);
  EXPECT_LE(*budget, std::max(before->free_bytes, after->free_bytes) - kCudaMemoryReserveBytes);
  EXPECT_GE(*budget, std::min(before->free_bytes, after->free_bytes) - kCudaMemoryReserveBytes);
  EXPECT_LT(*budget, before->total_bytes);
}

// Scratch an op cannot have (here: the bf16 rounding of an f32 matmul
// operand, over the allocator's budget) is a deferred RESOURCE_EXHAUSTED
// naming the op, not an abort; ops do nothing until it is taken, and work
// again afterwards.
TEST_F(CudaRuntimeTest, ScratchOverBudgetIsDeferredResourceExhausted) {
  ComputeDevice dev = Open(DType::kBF16);
  Backend& b = *dev.backend;
  Allocator& a = *dev.allocator;
  Tensor x = ToDevice(b, RandomTensor({1024, 512}, 1), DType::kF32);
  Tensor w = ToDevice(b, RandomTensor({256, 512}, 2), DType::kBF16);
  Tensor y = ToDevice(b, RandomTensor({1024, 256}, 3), DType::kF32);
  b.Synchronize();
  EXPECT_TRUE(b.TakeDeferredError().ok());
  a.set_budget_bytes(a.current_bytes() + 4096);  // the 1 MiB bf16 copy of x does not fit
  b.MatmulXWt(x, w, y, /*accumulate=*/false);
  b.Fill(y, 5.0f);  // skipped: an error is waiting
  a.set_budget_bytes(0);
  const absl::Status deferred = b.TakeDeferredError();
  EXPECT_EQ(deferred.code(), absl::StatusCode::kResourceExhausted) << deferred;
  EXPECT_NE(deferred.message().find("MatmulXWt"), std::string::npos) << deferred;
  EXPECT_NE(deferred.message().find("scratch"), std::string::npos) << deferred;
  EXPECT_TRUE(b.TakeDeferredError().ok()) << "taking the error clears it";
  for (double v : backend_test::ToHost(b, y)) ASSERT_NE(v, 5.0) << "Fill ran after the failure";
  b.Fill(y, 2.0f);
  EXPECT_EQ(backend_test::ToHost(b, y), op_test::Vec(1024 * 256, 2.0));
  // The same product with the memory available runs.
  b.MatmulXWt(x, w, y, /*accumulate=*/false);
  b.Synchronize();
  EXPECT_TRUE(b.TakeDeferredError().ok());
}

TEST_F(CudaRuntimeTest, DeviceOutOfMemoryIsResourceExhaustedWithFigures) {
  ComputeDevice dev = Open(DType::kBF16);
  auto memory = QueryDeviceMemory(Device::Cuda(0));
  ASSERT_TRUE(memory.ok()) << memory.status();
  auto huge = Tensor::Empty(*dev.allocator, {memory->total_bytes / 2}, DType::kF32, "too large");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(huge.status().message());
  EXPECT_NE(message.find("too large"), std::string::npos) << message;
  EXPECT_NE(message.find("free of"), std::string::npos) << message;
  // The device still works afterwards.
  auto small = Tensor::Empty(*dev.allocator, {16}, DType::kF32, "small");
  ASSERT_TRUE(small.ok()) << small.status();
  dev.backend->Fill(*small, 2.0f);
  EXPECT_EQ(backend_test::ToHost(*dev.backend, *small), op_test::Vec(16, 2.0));
}

TEST_F(CudaRuntimeTest, CopiesRoundTripExactly) {
  ComputeDevice dev = Open(DType::kBF16);
  Tensor host = RandomTensor({123, 7}, 1);
  Tensor d1 = ToDevice(*dev.backend, host, DType::kF32);
  auto d2 = Tensor::Empty(*dev.allocator, {123, 7}, DType::kF32, "copy");
  ASSERT_TRUE(d2.ok());
  dev.backend->Copy(d1, *d2);  // device to device
  Tensor back = op_test::NewTensor({123, 7});
  dev.backend->Copy(*d2, back);
  EXPECT_TRUE(op_test::BitwiseEqual(back, host));
}

TEST_F(CudaRuntimeTest, MatmulPeakIsMeasured) {
  ComputeDevice dev = Open(DType::kBF16);
  auto gflops = MeasureMatmulGflops(*dev.backend, DType::kBF16, 2048, 2);
  ASSERT_TRUE(gflops.ok()) << gflops.status();
  EXPECT_GT(*gflops, 1000.0);  // any tensor-core GPU does over 1 TFLOP/s
}

// StreamBP's pattern: K/V for the whole sequence, queries in chunks with a
// growing offset, dk/dv accumulated over the chunks; the sum equals the
// single call on the CPU (f32) and on the CUDA backend in both precisions.
TEST_F(CudaRuntimeTest, ChunkedAttentionBackwardAccumulatesLikeOneCall) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t d : {int64_t{16}, int64_t{128}}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " d=" + std::to_string(d));
      ComputeDevice dev = Open(dtype);
      Backend& b = *dev.backend;
      const int64_t t = 300, hq = 4, hkv = 2;
      const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
      Tensor q = RandomTensor({t, hq, d}, 2), k = RandomTensor({t, hkv, d}, 3);
      Tensor v = RandomTensor({t, hkv, d}, 4), dout = RandomTensor({t, hq, d}, 5);
      // CPU reference over all queries at once.
      Tensor out = op_test::NewTensor({t, hq, d}), lse = op_test::NewTensor({t, hq});
      cpu::AttentionForward(q, k, v, 0, scale, out, &lse);
      Tensor dq = op_test::NewTensor({t, hq, d}), dk = op_test::NewTensor({t, hkv, d});
      Tensor dv = op_test::NewTensor({t, hkv, d});
      cpu::AttentionBackward(q, k, v, out, dout, lse, 0, scale, dq, dk, dv);
      // Device: chunks of 70 query rows (not a tile multiple).
      Tensor gq = ToDevice(b, q, dtype), gk = ToDevice(b, k, dtype), gv = ToDevice(b, v, dtype);
      Tensor gdout = ToDevice(b, dout, dtype);
      Tensor gout = ToDevice(b, out, dtype), glse = ToDevice(b, lse, DType::kF32);
      Tensor gdq = ToDevice(b, op_test::NewTensor({t, hq, d}), dtype);
      Tensor gdk = ToDevice(b, op_test::NewTensor({t, hkv, d}), DType::kF32);
      Tensor gdv = ToDevice(b, op_test::NewTensor({t, hkv, d}), DType::kF32);
      for (int64_t s = 0; s < t; s += 70) {
        const int64_t e = std::min(t, s + 70);
        Tensor dq_rows = gdq.Rows(s, e);
        Tensor k_rows = gk.Rows(0, e), v_rows = gv.Rows(0, e);
        Tensor dk_rows = gdk.Rows(0, e), dv_rows = gdv.Rows(0, e);
        b.AttentionBackward(gq.Rows(s, e), k_rows, v_rows, gout.Rows(s, e), gdout.Rows(s, e),
                            glse.Rows(s, e), s, scale, dq_rows, dk_rows, dv_rows);
      }
      const double tol = dtype == DType::kF32 ? 2e-5 : 2e-2;
      EXPECT_LE(RelErr(backend_test::ToHost(b, gdq), op_test::ToDouble(dq)), tol);
      EXPECT_LE(RelErr(backend_test::ToHost(b, gdk), op_test::ToDouble(dk)), tol);
      EXPECT_LE(RelErr(backend_test::ToHost(b, gdv), op_test::ToDouble(dv)), tol);
    }
  }
}

}  // namespace
}  // namespace sbp
