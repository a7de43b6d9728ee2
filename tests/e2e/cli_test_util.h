// Running the real `sbp` binary from tests: its path, a scratch directory,
// and a helper that captures exit code, stdout and stderr.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace sbp::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string BinaryDir() {
  const char* dir = std::getenv("SBP_BINARY_DIR");
  return std::filesystem::absolute(dir ? dir : "build").string();
}

inline std::string SbpBinary() { return BinaryDir() + "/bin/sbp"; }

// The source tree (ctest sets SBP_SOURCE_DIR; tests otherwise run from it).
inline std::string SourceDir() {
  const char* dir = std::getenv("SBP_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `command` through the shell in `cwd`.
inline CommandResult RunCommand(const std::string& command, const std::filesystem::path& cwd) {
  const std::string out = (cwd / ".stdout").string(), err = (cwd / ".stderr").string();
  const std::string full =
      "cd '" + cwd.string() + "' && " + command + " >'" + out + "' 2>'" + err + "' </dev/null";
  const int status = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadAll(out);
  r.err = ReadAll(err);
  return r;
}

inline std::filesystem::path FreshDir(const std::string& name) {
  auto dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

}  // namespace sbp::testing
