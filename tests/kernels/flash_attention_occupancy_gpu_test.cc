// Occupancy of the tensor-core attention's dk/dv backward kernel
// (kernels/cuda/attention_flash.cu): on compute capability 9.x (228 KiB of
// shared memory per SM) at least 2 blocks fit per SM for head_dim 64 and 128,
// as cudaOccupancyMaxActiveBlocksPerMultiprocessor reports it for the dynamic
// shared memory the kernel is launched with. Skipped without CUDA or a
// device, and on other compute capabilities.
//
// The kernel's results against the CPU reference (bf16, head_dim 64 and 128,
// GQA, query offsets, sequences over several tiles, packed documents) are
// checked by backend_ops_gpu_test.cc.
#include <gtest/gtest.h>

#include "kernels/device_info.h"

#ifdef SBP_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"
#endif

namespace sbp {
namespace {

TEST(FlashAttentionOccupancy, DkDvKernelFitsTwoBlocksPerSmOnComputeCapability9) {
#ifndef SBP_WITH_CUDA
  GTEST_SKIP() << "CUDA not compiled in";
#else
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  int device = 0, major = 0, minor = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), cudaSuccess);
  if (major != 9) {
    GTEST_SKIP() << "compute capability " << major << "." << minor << ": the bound is for 9.x";
  }
  for (int head_dim : {64, 128}) {
    EXPECT_GE(cuda::FlashBackwardDkDvBlocksPerSm(head_dim), 2) << "head_dim " << head_dim;
  }
#endif
}

TEST(FlashAttentionOccupancy, NoDkDvKernelForOtherHeadDims) {
#ifndef SBP_WITH_CUDA
  GTEST_SKIP() << "CUDA not compiled in";
#else
  // Answered without touching a device.
  EXPECT_EQ(cuda::FlashBackwardDkDvBlocksPerSm(80), 0);
  EXPECT_EQ(cuda::FlashBackwardDkDvBlocksPerSm(256), 0);
#endif
}

}  // namespace
}  // namespace sbp
