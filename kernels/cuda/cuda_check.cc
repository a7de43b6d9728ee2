#include "kernels/cuda/cuda_check.h"

#include <cstdlib>
#include <cstring>

namespace sbp::cuda {
namespace {

bool SyncAfterEachKernel() {
  static const bool enabled = [] {
    const char* value = std::getenv("SBP_CUDA_SYNC_CHECK");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return enabled;
}

}  // namespace

void CheckLaunch(const char* kernel, cudaStream_t stream) {
  const cudaError_t launch = cudaGetLastError();
  CHECK(launch == cudaSuccess) << "launching " << kernel << " failed: " << cudaGetErrorName(launch)
                               << " (" << cudaGetErrorString(launch) << ")";
  if (SyncAfterEachKernel()) {
    const cudaError_t run = cudaStreamSynchronize(stream);
    CHECK(run == cudaSuccess) << kernel << " failed on the device: " << cudaGetErrorName(run)
                              << " (" << cudaGetErrorString(run) << ")";
  }
}

}  // namespace sbp::cuda
