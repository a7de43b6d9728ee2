// OpenBLAS 0.3.21 (Debian 12) does not recognise recent Xeons and falls back
// to its SSE3 "Prescott" kernels, about 5x slower than its AVX-512 ones on the
// same CPU. The core type can only be chosen when the library loads, so a
// binary calls EnsureFastOpenBlasCore first thing in main(): when the
// variable is unset, the CPU has AVX-512F (or AVX2) and OpenBLAS picked an
// older core, it re-executes itself with OPENBLAS_CORETYPE=SkylakeX (or
// Haswell). An OPENBLAS_CORETYPE already in the environment is always kept,
// and SBP_OPENBLAS_CORETYPE=keep disables the switch.
#pragma once

#include <string>

namespace sbp::cpu {

// The kernel family OpenBLAS chose ("Prescott", "SkylakeX", ...).
std::string OpenBlasCoreName();

// Returns only when no switch is needed (or the re-exec failed).
void EnsureFastOpenBlasCore(char** argv);

// What a binary that runs kernels calls first thing in main():
// EnsureFastOpenBlasCore, then RequireOpenMpBlas (kernels/cpu/blas_info.h),
// which exits unless the OpenBLAS loaded is the OpenMP build. The check comes
// after the re-exec so that it runs, and warns, once.
void PrepareOpenBlas(char** argv);

}  // namespace sbp::cpu
