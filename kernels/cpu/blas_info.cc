#include "kernels/cpu/blas_info.h"

#include <cblas.h>
#include <dlfcn.h>
#include <errno.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace sbp::cpu {
namespace {

BlasThreading ThreadingOf(int parallel) {
  switch (parallel) {
    case OPENBLAS_SEQUENTIAL:
      return BlasThreading::kSequential;
    case OPENBLAS_THREAD:
      return BlasThreading::kPthreads;
    case OPENBLAS_OPENMP:
      return BlasThreading::kOpenMp;
    default:
      return BlasThreading::kUnknown;
  }
}

// The file that defines cblas_sgemm in this process. The symbol is looked up
// through the loader rather than by taking its address here: in an executable
// that is not position-independent that address is a PLT stub of the
// executable itself.
std::string LoadedBlasPath() {
  void* symbol = dlsym(RTLD_DEFAULT, "cblas_sgemm");
  Dl_info info;
  if (symbol == nullptr || dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

std::string OrEmpty(const char* text) { return text != nullptr ? text : ""; }

// The loader settings that come before the executable's RUNPATH, when set.
std::string LoaderOverrides() {
  std::string overrides;
  for (const char* name : {"LD_LIBRARY_PATH", "LD_PRELOAD"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    absl::StrAppend(&overrides, overrides.empty() ? "" : " and ", name, "=", value);
  }
  return overrides;
}

bool VariantAllowedByEnv() {
  const char* allow = std::getenv(kAllowBlasVariantEnv);
  return allow != nullptr && std::strcmp(allow, "1") == 0;
}

}  // namespace

absl::string_view BlasThreadingName(BlasThreading threading) {
  switch (threading) {
    case BlasThreading::kSequential:
      return "sequential";
    case BlasThreading::kPthreads:
      return "pthreads";
    case BlasThreading::kOpenMp:
      return "openmp";
    case BlasThreading::kUnknown:
      break;
  }
  return "unknown";
}

BlasInfo CurrentBlasInfo() {
  BlasInfo info;
  info.library_path = LoadedBlasPath();
  info.threading = ThreadingOf(openblas_get_parallel());
  info.core_name = OrEmpty(openblas_get_corename());
  info.config = OrEmpty(openblas_get_config());
  info.num_threads = openblas_get_num_threads();
  return info;
}

std::string BlasSummary(const BlasInfo& info) {
  return absl::StrCat(info.library_path.empty() ? "(unknown library)" : info.library_path, " (",
                      BlasThreadingName(info.threading), ", ", info.core_name, ", ",
                      info.num_threads, info.num_threads == 1 ? " thread)" : " threads)");
}

std::string BlasSummary() { return BlasSummary(CurrentBlasInfo()); }

absl::Status CheckOpenMpBlas(const BlasInfo& info) {
  if (info.threading == BlasThreading::kOpenMp) return absl::OkStatus();
  std::string message = absl::StrCat(
      "the BLAS loaded is ", BlasSummary(info),
      ", not the OpenMP build of OpenBLAS that the kernels are built for; its threads would "
      "compete with the kernels' OpenMP threads (a training step takes about twice as long)");
  const std::string overrides = LoaderOverrides();
  if (!overrides.empty()) {
    absl::StrAppend(&message, ". ", overrides,
                    " comes before the binary's RUNPATH (the openblas-openmp directory)");
  }
  return absl::FailedPreconditionError(message);
}

void RequireOpenMpBlas() {
  const absl::Status status = CheckOpenMpBlas(CurrentBlasInfo());
  if (status.ok()) return;
  if (VariantAllowedByEnv()) {
    std::fprintf(stderr, "%s: warning: %s (running anyway: %s=1)\n", program_invocation_short_name,
                 std::string(status.message()).c_str(), kAllowBlasVariantEnv);
    return;
  }
  std::fprintf(stderr, "%s: refusing to run: %s. Set %s=1 to run anyway (for measurements).\n",
               program_invocation_short_name, std::string(status.message()).c_str(),
               kAllowBlasVariantEnv);
  std::exit(1);
}

}  // namespace sbp::cpu
