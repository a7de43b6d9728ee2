#include <cuda_runtime.h>

#include "kernels/cuda/cuda_runtime_info.h"

namespace sbp::cuda {
namespace {

__global__ void FillKernel(float* data, long long n, float value) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i < n) data[i] = value;
}

}  // namespace

int VisibleDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::string CompiledArchitectures() { return "sm_80, sm_90"; }

bool FillDeviceFloats(float* data, long long n, float value, std::string* error) {
  if (n <= 0) return true;  // nothing to launch (0 blocks is an invalid configuration)
  const int threads = 256;
  const long long blocks = (n + threads - 1) / threads;
  FillKernel<<<static_cast<unsigned>(blocks), threads>>>(data, n, value);
  // A launch that failed (no kernel image for this GPU, a bad configuration)
  // is reported here, not by the synchronisation below.
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    *error = std::string("launching FillKernel failed: ") + cudaGetErrorName(status) + " (" +
             cudaGetErrorString(status) + ")";
    return false;
  }
  status = cudaDeviceSynchronize();
  if (status != cudaSuccess) {
    *error = std::string("FillKernel failed on the device: ") + cudaGetErrorName(status) + " (" +
             cudaGetErrorString(status) + ")";
    return false;
  }
  return true;
}

}  // namespace sbp::cuda
