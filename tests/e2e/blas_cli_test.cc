// The binaries load the OpenMP build of OpenBLAS whatever the alternatives
// system says (scripts/bootstrap installs the pthread build, which then owns
// /usr/lib/<multiarch>/libopenblas.so.0), print it in `sbp --version`, and
// refuse to run on the pthread build when LD_LIBRARY_PATH brings it in.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/e2e/cli_test_util.h"

namespace sbp::testing {
namespace {

// The library path and variant of `sbp --version`'s line
// "blas: <path> (<variant>, <core>, <n> threads)".
struct BlasLine {
  std::string path;
  std::string variant;
};

bool ParseBlasLine(const std::string& text, BlasLine* line) {
  static const std::regex kBlasLine(R"(blas: (\S+) \((\w+), \w+, \d+ threads?\))");
  std::istringstream lines(text);
  std::smatch match;
  for (std::string candidate; std::getline(lines, candidate);) {
    if (std::regex_match(candidate, match, kBlasLine)) {
      *line = {match[1].str(), match[2].str()};
      return true;
    }
  }
  return false;
}

// The pthread build's directory beside the OpenMP one the binary loads, or ""
// where it is not installed.
std::string PthreadBlasDirBeside(const std::string& openmp_library) {
  const std::filesystem::path dir =
      std::filesystem::path(openmp_library).parent_path().parent_path() / "openblas-pthread";
  return std::filesystem::exists(dir / "libopenblas.so.0") ? dir.string() : "";
}

class BlasCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir("blas_cli");
    const CommandResult r = Run(absl::StrCat("'", SbpBinary(), "' --version"));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    ASSERT_TRUE(ParseBlasLine(r.out, &loaded_)) << r.out;
  }

  CommandResult Run(const std::string& command) const { return RunCommand(command, dir_); }

  std::filesystem::path dir_;
  BlasLine loaded_;
};

TEST_F(BlasCliTest, VersionReportsTheOpenMpBuild) {
  EXPECT_EQ(loaded_.variant, "openmp") << loaded_.path;
  EXPECT_EQ(std::filesystem::path(loaded_.path).parent_path().filename(), "openblas-openmp")
      << loaded_.path;
}

TEST_F(BlasCliTest, ThePthreadBuildInLdLibraryPathIsRefused) {
  const std::string pthread_dir = PthreadBlasDirBeside(loaded_.path);
  if (pthread_dir.empty()) GTEST_SKIP() << "libopenblas0-pthread is not installed";
  const std::string commands[] = {absl::StrCat("'", SbpBinary(), "' --version"),
                                  absl::StrCat("'", BinaryDir(), "/bin/sbp-worker' --help")};
  for (const std::string& command : commands) {
    const CommandResult r = Run(absl::StrCat("env -u SBP_ALLOW_BLAS_VARIANT LD_LIBRARY_PATH='",
                                             pthread_dir, "' ", command));
    EXPECT_EQ(r.exit_code, 1) << command << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("refusing to run"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("pthreads"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("LD_LIBRARY_PATH=" + pthread_dir), std::string::npos) << r.err;
  }
}

TEST_F(BlasCliTest, TheOverrideRunsThePthreadBuildWithAWarning) {
  const std::string pthread_dir = PthreadBlasDirBeside(loaded_.path);
  if (pthread_dir.empty()) GTEST_SKIP() << "libopenblas0-pthread is not installed";
  const CommandResult r = Run(absl::StrCat("SBP_ALLOW_BLAS_VARIANT=1 LD_LIBRARY_PATH='",
                                           pthread_dir, "' '", SbpBinary(), "' --version"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("warning"), std::string::npos) << r.err;
  BlasLine line;
  ASSERT_TRUE(ParseBlasLine(r.out, &line)) << r.out;
  EXPECT_EQ(line.variant, "pthreads");
  EXPECT_EQ(std::filesystem::path(line.path).parent_path(), pthread_dir);
}

}  // namespace
}  // namespace sbp::testing
