// cuBLAS is loaded on first use, not at program start (kernels/cuda/
// cublas_library.h): this process must not have it mapped until LoadCublas,
// and afterwards the functions the engine calls must be there. Needs the CUDA
// libraries but no device, so it runs wherever the build has CUDA.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#if defined(SBP_WITH_CUDA)
#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/cuda_check.h"
#endif

namespace sbp {
namespace {

// Whether a file whose name contains `name` is mapped into this process.
bool Mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

#if defined(SBP_WITH_CUDA)

TEST(CublasLibraryTest, LoadedOnFirstUseOnly) {
  EXPECT_FALSE(Mapped("libcublas")) << "cuBLAS was loaded at start";
  absl::StatusOr<const cuda::CublasLibrary*> cublas = cuda::LoadCublas();
  ASSERT_TRUE(cublas.ok()) << cublas.status();
  EXPECT_TRUE(Mapped(cuda::CublasSoname()));
  EXPECT_TRUE(Mapped("libcublasLt"));
  EXPECT_EQ(*cuda::LoadCublas(), *cublas) << "loaded twice";
}

TEST(CublasLibraryTest, EveryFunctionIsThereAndStatusesAreNamed) {
  absl::StatusOr<const cuda::CublasLibrary*> loaded = cuda::LoadCublas();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const cuda::CublasLibrary& cublas = **loaded;
  EXPECT_NE(cublas.create, nullptr);
  EXPECT_NE(cublas.destroy, nullptr);
  EXPECT_NE(cublas.set_stream, nullptr);
  EXPECT_NE(cublas.set_pointer_mode, nullptr);
  EXPECT_NE(cublas.set_math_mode, nullptr);
  EXPECT_NE(cublas.set_workspace, nullptr);
  EXPECT_NE(cublas.gemm_ex, nullptr);
  EXPECT_STREQ(cublas.status_name(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  const std::string described = cuda::DescribeCublas(CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(described.rfind("CUBLAS_STATUS_NOT_INITIALIZED (", 0), 0u) << described;
  EXPECT_GT(described.size(), std::string("CUBLAS_STATUS_NOT_INITIALIZED ()").size());
}

#else

TEST(CublasLibraryTest, LoadedOnFirstUseOnly) {
  EXPECT_FALSE(Mapped("libcublas"));
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace
}  // namespace sbp
