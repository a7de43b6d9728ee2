// Helpers shared by the worker/train tests: scratch directories and files.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sbp::train_testing {

// A fresh empty directory under the test's temporary directory.
inline std::string MakeTempDir(absl::string_view prefix) {
  std::string pattern = absl::StrCat(::testing::TempDir(), "/", prefix, "-XXXXXX");
  char* made = ::mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
  return pattern;
}

inline void WriteFile(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  ASSERT_TRUE(out.good()) << "writing " << path;
}

// The source tree (tests run from it; ctest also sets SBP_SOURCE_DIR).
inline std::string SourceDir() {
  const char* dir = ::getenv("SBP_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

}  // namespace sbp::train_testing
