#include "kernels/cpu/openblas_core.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/blas_info.h"

extern "C" char* openblas_get_corename(void);

namespace sbp::cpu {
namespace {

bool IsOlderThanHaswell(const std::string& core) {
  for (const char* old : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                          "Sandybridge", "Katmai", "Coppermine", "Northwood", "Banias"}) {
    if (strcasecmp(core.c_str(), old) == 0) return true;
  }
  return false;
}

}  // namespace

std::string OpenBlasCoreName() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

void EnsureFastOpenBlasCore(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const char* opt_out = std::getenv("SBP_OPENBLAS_CORETYPE");
  if (opt_out != nullptr && std::strcmp(opt_out, "keep") == 0) return;
  const std::string core = OpenBlasCoreName();
  const char* target = nullptr;
  if (__builtin_cpu_supports("avx512f") && core != "SkylakeX" && core != "Cooperlake" &&
      core != "SapphireRapids" && (IsOlderThanHaswell(core) || core == "Haswell")) {
    target = "SkylakeX";
  } else if (__builtin_cpu_supports("avx2") && IsOlderThanHaswell(core)) {
    target = "Haswell";
  }
  if (target == nullptr) return;
  setenv("OPENBLAS_CORETYPE", target, 1);
  execv("/proc/self/exe", argv);
  // The exec failed: carry on with the kernels we have.
}

void PrepareOpenBlas(char** argv) {
  EnsureFastOpenBlasCore(argv);
  RequireOpenMpBlas();
}

}  // namespace sbp::cpu
