#include "kernels/device_info.h"

#include "absl/strings/str_cat.h"
#include "common/version.h"

#ifdef SBP_WITH_CUDA
#include "kernels/cuda/cuda_runtime_info.h"
#endif

namespace sbp {

int CudaDeviceCount() {
#ifdef SBP_WITH_CUDA
  return cuda::VisibleDeviceCount();
#else
  return 0;
#endif
}

std::string CudaSupportSummary() {
  if (!kCudaCompiled) return "cuda: not compiled";
#ifdef SBP_WITH_CUDA
  return absl::StrCat("cuda: compiled (", cuda::CompiledArchitectures(), "), ",
                      CudaDeviceCount(), " device(s) visible");
#else
  return "cuda: not compiled";
#endif
}

}  // namespace sbp
