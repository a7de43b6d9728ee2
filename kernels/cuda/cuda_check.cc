#include "kernels/cuda/cuda_check.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cublas_library.h"

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

std::string DescribeCublas(cublasStatus_t status) {
  const CublasLibrary& cublas = Cublas();
  return absl::StrCat(cublas.status_name(status), " (", cublas.status_string(status), ")");
}

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
