// Status checks of CUDA runtime and cuBLAS calls. A failing call is a CHECK
// failure that names the call, the error and the op it served: the engine
// cannot continue after a device fault, and the message must say where it
// happened. Usable from .cu (C++17) and .cc files.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "common/check.h"

#define SBP_CUDA_CHECK(call)                                                  \
  do {                                                                        \
    const cudaError_t sbp_cuda_status_ = (call);                              \
    CHECK(sbp_cuda_status_ == cudaSuccess)                                    \
        << #call << " failed: " << cudaGetErrorName(sbp_cuda_status_) << " (" \
        << cudaGetErrorString(sbp_cuda_status_) << ")";                       \
  } while (0)

#define SBP_CUBLAS_CHECK(call)                                                      \
  do {                                                                              \
    const cublasStatus_t sbp_cublas_status_ = (call);                               \
    CHECK(sbp_cublas_status_ == CUBLAS_STATUS_SUCCESS)                              \
        << #call << " failed: " << ::sbp::cuda::DescribeCublas(sbp_cublas_status_); \
  } while (0)

namespace sbp::cuda {

// "CUBLAS_STATUS_... (its description)", from the loaded cuBLAS
// (cublas_library.h).
std::string DescribeCublas(cublasStatus_t status);

// After a kernel launch: CHECK-fails naming `kernel` when the launch failed
// (bad configuration, no kernel image for this GPU). With SBP_CUDA_SYNC_CHECK=1
// in the environment it also waits for the kernel, so that a fault inside it
// is reported with its name instead of at the next synchronisation.
void CheckLaunch(const char* kernel, cudaStream_t stream);

}  // namespace sbp::cuda
