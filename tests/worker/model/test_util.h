// Helpers shared by the worker/model tests: scratch directories and
// hand-built safetensors images.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sbp::testing {

// A fresh empty directory under the test's temporary directory.
inline std::string MakeTempDir(absl::string_view prefix) {
  std::string pattern = absl::StrCat(::testing::TempDir(), "/", prefix, "-XXXXXX");
  char* made = ::mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
  return pattern;
}

// [u64 little-endian header length][header][data]; `declared_length`
// overrides the length field when set.
inline std::string SafetensorsImage(absl::string_view header, absl::string_view data,
                                    int64_t declared_length = -1) {
  const uint64_t length =
      declared_length >= 0 ? static_cast<uint64_t>(declared_length) : header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &length, 8);
  absl::StrAppend(&out, header, data);
  return out;
}

inline void WriteFile(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace sbp::testing
