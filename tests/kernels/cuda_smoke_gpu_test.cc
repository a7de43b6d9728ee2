// Runs a kernel on the first CUDA device; skipped without CUDA or a device.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/device_info.h"

#ifdef SBP_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_runtime_info.h"
#endif

namespace sbp {
namespace {

TEST(CudaSmoke, FillKernelWritesDeviceMemory) {
#ifndef SBP_WITH_CUDA
  GTEST_SKIP() << "CUDA not compiled in";
#else
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const long long n = 1000;
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, n * sizeof(float)), cudaSuccess);
  std::string error;
  ASSERT_TRUE(cuda::FillDeviceFloats(device, n, 3.5f, &error)) << error;
  std::vector<float> host(n);
  ASSERT_EQ(cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(device);
  for (float x : host) ASSERT_EQ(x, 3.5f);
#endif
}

}  // namespace
}  // namespace sbp
