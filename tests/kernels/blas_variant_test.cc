// The BLAS this test binary loads is the OpenMP build of OpenBLAS, as linked
// by cmake/SbpDependencies.cmake and found through the executable's RUNPATH,
// even where the alternatives system points libopenblas.so.0 at the pthread
// build (scripts/bootstrap installs it so that every machine has that
// setting). tests/e2e/blas_cli_test.cc checks the `sbp` binary the same way.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "kernels/cpu/blas_info.h"

namespace sbp::cpu {
namespace {

TEST(BlasVariantTest, LoadedBlasIsTheOpenMpBuild) {
  const BlasInfo info = CurrentBlasInfo();
  EXPECT_EQ(std::string(BlasThreadingName(info.threading)), "openmp") << BlasSummary(info);
  EXPECT_TRUE(CheckOpenMpBlas(info).ok()) << CheckOpenMpBlas(info);
}

TEST(BlasVariantTest, LoadedFileIsInTheOpenMpDirectory) {
  const BlasInfo info = CurrentBlasInfo();
  ASSERT_FALSE(info.library_path.empty());
  // The loader's own name for the file, before the alternatives' symlinks.
  const std::string directory =
      std::filesystem::path(info.library_path).parent_path().filename().string();
  EXPECT_EQ(directory, "openblas-openmp") << info.library_path;
}

TEST(BlasVariantTest, InfoNamesCoreThreadsAndConfig) {
  const BlasInfo info = CurrentBlasInfo();
  EXPECT_FALSE(info.core_name.empty());
  EXPECT_GE(info.num_threads, 1);
  EXPECT_NE(info.config.find("OpenBLAS"), std::string::npos) << info.config;
  const std::string summary = BlasSummary(info);
  EXPECT_NE(summary.find(info.library_path), std::string::npos) << summary;
  EXPECT_NE(summary.find(std::string(BlasThreadingName(info.threading))), std::string::npos)
      << summary;
  EXPECT_NE(summary.find(info.core_name), std::string::npos) << summary;
}

TEST(BlasVariantTest, OtherVariantsAreRefusedWithTheLibraryNamed) {
  for (const BlasThreading threading :
       {BlasThreading::kPthreads, BlasThreading::kSequential, BlasThreading::kUnknown}) {
    BlasInfo info;
    info.library_path = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0";
    info.threading = threading;
    info.core_name = "SkylakeX";
    info.num_threads = 2;
    const absl::Status status = CheckOpenMpBlas(info);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(status.message().find(info.library_path), std::string::npos) << status;
    EXPECT_NE(status.message().find(BlasThreadingName(threading)), std::string::npos) << status;
  }
}

TEST(BlasVariantTest, SummaryFormat) {
  BlasInfo info;
  info.library_path = "/lib/libopenblas.so.0";
  info.threading = BlasThreading::kOpenMp;
  info.core_name = "Haswell";
  info.num_threads = 1;
  EXPECT_EQ(BlasSummary(info), "/lib/libopenblas.so.0 (openmp, Haswell, 1 thread)");
  info.num_threads = 8;
  EXPECT_EQ(BlasSummary(info), "/lib/libopenblas.so.0 (openmp, Haswell, 8 threads)");
}

}  // namespace
}  // namespace sbp::cpu
