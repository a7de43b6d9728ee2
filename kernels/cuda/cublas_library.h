// cuBLAS, loaded when the first CUDA backend is created instead of at program
// start. Linking libcublas pulls in libcublasLt, and loading that alone costs
// every process ~210 MB of resident memory and ~70 ms (its relocations and
// static initialisers): the `sbp` CLI for `sbp get`, CPU workers, CPU runs of
// `sbp bench`. The engine calls nine cuBLAS functions; they are looked up here
// by name, with the types of cublas_api.h, so a mismatch fails to compile.
#pragma once

#include <cublas_v2.h>

#include "absl/status/statusor.h"

namespace sbp::cuda {

// cublasGemmEx has a C++ overload taking a cudaDataType compute type; this is
// the exported one (the static_cast, unevaluated, fails to compile otherwise).
using CublasGemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                          int, int, const void*, const void*, cudaDataType, int,
                                          const void*, cudaDataType, int, const void*, void*,
                                          cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using CublasGemmExChecked = decltype(static_cast<CublasGemmExFn>(&::cublasGemmEx));

struct CublasLibrary {
  decltype(&::cublasCreate_v2) create;
  decltype(&::cublasDestroy_v2) destroy;
  decltype(&::cublasSetStream_v2) set_stream;
  decltype(&::cublasSetPointerMode_v2) set_pointer_mode;
  decltype(&::cublasSetMathMode) set_math_mode;
  decltype(&::cublasSetWorkspace_v2) set_workspace;
  CublasGemmExChecked gemm_ex;
  decltype(&::cublasGetStatusName) status_name;
  decltype(&::cublasGetStatusString) status_string;
};

// The soname the headers were built against ("libcublas.so.13").
const char* CublasSoname();

// Loads the library once per process, through the dynamic loader's usual
// search (the binary's RPATH/RUNPATH, LD_LIBRARY_PATH, the ld.so cache). A
// failure is FailedPrecondition naming the library and the loader's message,
// and is returned again by later calls.
absl::StatusOr<const CublasLibrary*> LoadCublas();

// The loaded library; CHECK-fails when LoadCublas has not succeeded.
const CublasLibrary& Cublas();

}  // namespace sbp::cuda
