#include "client/cli_common.h"

#include <cstdio>
#include <fstream>
#include <string>

namespace sbp::cli {

int ReportError(const std::string& command, const absl::Status& status) {
  std::fprintf(stderr, "sbp %s: %s\n", command.c_str(), std::string(status.message()).c_str());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kAlreadyExists:
      return kExitBadInput;
    default:
      return kExitFailed;
  }
}

namespace {

// A "Key: N kB" line of /proc/self/status, in bytes; 0 when absent.
int64_t StatusBytes(const std::string& wanted) {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == wanted) {
      int64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    std::string rest;
    std::getline(status, rest);
  }
  return 0;
}

}  // namespace

int64_t PeakRssBytes() { return StatusBytes("VmHWM:"); }
int64_t CurrentRssBytes() { return StatusBytes("VmRSS:"); }

bool ResetPeakRss() {
  std::ofstream clear("/proc/self/clear_refs");
  if (!clear) return false;
  clear << "5";
  return static_cast<bool>(clear);
}

}  // namespace sbp::cli
