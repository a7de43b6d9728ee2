// What compute devices this build and this machine offer.
#pragma once

#include <string>

namespace sbp {

// Number of usable CUDA devices; 0 when CUDA is not compiled in or no driver/GPU.
int CudaDeviceCount();

// One line for `sbp --version`: "cuda: compiled (sm_80, sm_90), 0 devices visible"
// or "cuda: not compiled".
std::string CudaSupportSummary();

}  // namespace sbp
