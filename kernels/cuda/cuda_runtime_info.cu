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
  const int threads = 256;
  const long long blocks = (n + threads - 1) / threads;
  FillKernel<<<static_cast<unsigned>(blocks), threads>>>(data, n, value);
  const cudaError_t status = cudaDeviceSynchronize();
  if (status != cudaSuccess) {
    *error = cudaGetErrorString(status);
    return false;
  }
  return true;
}

}  // namespace sbp::cuda
