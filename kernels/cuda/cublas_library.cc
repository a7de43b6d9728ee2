#include "kernels/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace sbp::cuda {
namespace {

#define SBP_STRINGIFY_INNER(x) #x
#define SBP_STRINGIFY(x) SBP_STRINGIFY_INNER(x)
constexpr char kSoname[] = "libcublas.so." SBP_STRINGIFY(CUBLAS_VER_MAJOR);

// Looks `name` up into `slot`; false (with `error` set) when it is missing.
template <typename Fn>
bool Resolve(void* handle, const char* name, Fn& slot, std::string& error) {
  slot = reinterpret_cast<Fn>(dlsym(handle, name));
  if (slot == nullptr && error.empty()) {
    error = absl::StrCat(kSoname, " has no ", name, " (", dlerror(), ")");
  }
  return slot != nullptr;
}

absl::StatusOr<const CublasLibrary*> Load() {
  // Never unloaded: cuBLAS handles may live until exit.
  void* handle = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load ", kSoname, " for the CUDA backend: ", dlerror(),
                     " (put the CUDA libraries' folder on LD_LIBRARY_PATH)"));
  }
  auto* library = new CublasLibrary;
  std::string error;
  Resolve(handle, "cublasCreate_v2", library->create, error);
  Resolve(handle, "cublasDestroy_v2", library->destroy, error);
  Resolve(handle, "cublasSetStream_v2", library->set_stream, error);
  Resolve(handle, "cublasSetPointerMode_v2", library->set_pointer_mode, error);
  Resolve(handle, "cublasSetMathMode", library->set_math_mode, error);
  Resolve(handle, "cublasSetWorkspace_v2", library->set_workspace, error);
  Resolve(handle, "cublasGemmEx", library->gemm_ex, error);
  Resolve(handle, "cublasGetStatusName", library->status_name, error);
  Resolve(handle, "cublasGetStatusString", library->status_string, error);
  if (!error.empty()) {
    delete library;
    return absl::FailedPreconditionError(error);
  }
  return library;
}

const absl::StatusOr<const CublasLibrary*>& Loaded() {
  static const absl::StatusOr<const CublasLibrary*> loaded = Load();  // thread-safe, once
  return loaded;
}

}  // namespace

const char* CublasSoname() { return kSoname; }

absl::StatusOr<const CublasLibrary*> LoadCublas() { return Loaded(); }

const CublasLibrary& Cublas() {
  const absl::StatusOr<const CublasLibrary*>& loaded = Loaded();
  CHECK(loaded.ok()) << loaded.status();
  return **loaded;
}

}  // namespace sbp::cuda
