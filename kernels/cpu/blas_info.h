// The BLAS library this process runs its CPU kernels on, as loaded rather than
// as linked. The build links the OpenMP build of OpenBLAS by its own path and
// puts its directory in every executable's RUNPATH
// (cmake/SbpDependencies.cmake), but LD_LIBRARY_PATH, LD_PRELOAD or a binary
// built elsewhere can still bring in the pthread build, whose thread pool
// fights the kernels' OpenMP one and halves the speed. `sbp --version`,
// `sbp bench` and the worker's start-up log print BlasSummary(), and the
// binaries refuse to run on any other variant (RequireOpenMpBlas).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sbp::cpu {

// How OpenBLAS runs its own threads (openblas_get_parallel()).
enum class BlasThreading { kSequential, kPthreads, kOpenMp, kUnknown };

// "sequential", "pthreads", "openmp" or "unknown".
absl::string_view BlasThreadingName(BlasThreading threading);

struct BlasInfo {
  // The file cblas_sgemm was loaded from, as the dynamic loader found it
  // (e.g. /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0).
  std::string library_path;
  BlasThreading threading = BlasThreading::kUnknown;
  std::string core_name;  // the kernel family: "SkylakeX", "Haswell", ...
  std::string config;     // openblas_get_config()
  int num_threads = 0;    // openblas_get_num_threads()
};

BlasInfo CurrentBlasInfo();

// One line, e.g. "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0
// (openmp, SkylakeX, 2 threads)".
std::string BlasSummary(const BlasInfo& info);
std::string BlasSummary();

// OK for the OpenMP build; FailedPrecondition otherwise, naming the library
// loaded and the loader overrides (LD_LIBRARY_PATH, LD_PRELOAD) that can
// explain it.
absl::Status CheckOpenMpBlas(const BlasInfo& info);

// The environment variable that turns RequireOpenMpBlas's refusal into a
// warning: SBP_ALLOW_BLAS_VARIANT=1, for measuring the other variants only.
inline constexpr char kAllowBlasVariantEnv[] = "SBP_ALLOW_BLAS_VARIANT";

// Called first thing in main(): when CheckOpenMpBlas fails, prints why and
// exits with status 1, or only warns when SBP_ALLOW_BLAS_VARIANT=1.
void RequireOpenMpBlas();

}  // namespace sbp::cpu
