// The CUDA embedding backward (sorted runs of equal ids, added in token
// order) against the CPU's: bit for bit, with f32 and bf16 gradients, many
// repeated ids, a hidden size that is not a multiple of the block, and a
// gradient table that already holds values (it accumulates). Also its
// scratch against the planner's bound. Skipped without CUDA or a device.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <tuple>

#include "kernels/compute_device.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cuda_scratch_sizes.h"
#include "kernels/device_info.h"
#include "tests/kernels/backend_test_util.h"
#include "tests/kernels/op_test_util.h"

#ifdef SBP_WITH_CUDA
#include "kernels/cuda/launch.h"
#endif

namespace sbp {
namespace {

using op_test::RandomInts;
using op_test::RandomTensor;

class EmbeddingBackwardGpuTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (" << CudaSupportSummary() << ")";
  }
};

Tensor ToDevice(Backend& b, const Tensor& host) {
  auto t = Tensor::Empty(b.allocator(), host.shape(), host.dtype(), "test");
  CHECK_OK(t.status());
  b.Copy(host, *t);
  return *t;
}

TEST_P(EmbeddingBackwardGpuTest, BitIdenticalToTheCpu) {
  const DType dtype = GetParam();
  auto device = OpenComputeDevice("cuda:0", dtype);
  ASSERT_TRUE(device.ok()) << device.status();
  Backend& b = *device->backend;
  for (const auto& [tokens, hidden, vocab] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 7, 3}, {5000, 300, 40}, {70000, 64, 151936}}) {
    Tensor ids = RandomInts({tokens}, 1, 0, static_cast<int32_t>(vocab));
    Tensor dout32 = RandomTensor({tokens, hidden}, 2);
    Tensor dout = op_test::NewTensor(dout32.shape(), dtype);
    cpu::Cast(dout32, dout);
    Tensor dout_as_f32 = op_test::NewTensor(dout32.shape(), DType::kF32);
    cpu::Cast(dout, dout_as_f32);  // the values the device reads
    Tensor table = RandomTensor({vocab, hidden}, 3);

    Tensor want = op_test::Clone(table);
    cpu::EmbeddingBackward(ids, dout_as_f32, want);

    Tensor d_ids = ToDevice(b, ids), d_dout = ToDevice(b, dout), d_table = ToDevice(b, table);
    b.EmbeddingBackward(d_ids, d_dout, d_table);
    Tensor got = op_test::NewTensor(table.shape(), DType::kF32);
    b.Copy(d_table, got);
    ASSERT_TRUE(b.TakeDeferredError().ok());
    EXPECT_TRUE(op_test::BitwiseEqual(got, want))
        << "tokens " << tokens << " hidden " << hidden << " " << DTypeName(dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmbeddingBackwardGpuTest,
                         ::testing::Values(DType::kF32, DType::kBF16));

#ifdef SBP_WITH_CUDA
TEST_F(EmbeddingBackwardGpuTest, ScratchWithinThePlannersBound) {
  for (int64_t tokens : {1, 1000, 32768, 131072, 1 << 20, 1 << 22}) {
    const int64_t bytes = static_cast<int64_t>(cuda::EmbeddingBackwardScratchBytes(tokens));
    EXPECT_GT(bytes, 0);
    EXPECT_LE(bytes, cuda::EmbeddingBackwardScratchBound(tokens)) << tokens << " tokens";
  }
}
#endif

}  // namespace
}  // namespace sbp
