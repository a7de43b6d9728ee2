// Shared pieces of the sbp commands: exit codes and error reporting.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace sbp::cli {

// Exit codes: 0 success, 1 the job/computation failed, 2 usage or bad input.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitBadInput = 2;

// Prints "sbp <command>: <message>" to stderr and returns the exit code the
// status deserves: 2 for bad input (InvalidArgument, NotFound,
// FailedPrecondition, OutOfRange), 1 otherwise.
int ReportError(const std::string& command, const absl::Status& status);

// Peak resident set size of this process (VmHWM), bytes; 0 when unknown.
int64_t PeakRssBytes();
// Current resident set size (VmRSS), bytes; 0 when unknown.
int64_t CurrentRssBytes();
// Resets the VmHWM high-water mark to the current RSS (Linux clear_refs 5);
// false when the kernel does not allow it.
bool ResetPeakRss();

}  // namespace sbp::cli
