// Host-side queries of the CUDA runtime (compiled only when CUDA is on).
#pragma once

#include <string>

namespace sbp::cuda {

// Devices the runtime can use; 0 (not an error) without a driver or GPU.
int VisibleDeviceCount();
// "sm_80, sm_90": the architectures this build carries code for.
std::string CompiledArchitectures();
// Fills n floats at device pointer `data` with `value` (a smoke kernel used
// by the gpu tests); returns false with `error` set when CUDA fails.
bool FillDeviceFloats(float* data, long long n, float value, std::string* error);

}  // namespace sbp::cuda
