// Why an operation failed, in the terms the coordinator's retry policy reads
// (DESIGN §7), carried on an absl::Status as a payload so that it survives
// being returned through layers that only add context. Most failures are
// classified by their status code (InvalidArgument: bad input,
// ResourceExhausted: out of memory); these kinds are the ones a code cannot
// say: storage that failed under us (ENOSPC, EIO, EROFS, EDQUOT: retried
// with backoff), a run that diverged (non-finite loss: not retried), and an
// attempt that lost its lease or was fenced out by a newer one.
#pragma once

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sbp {

enum class FailureKind { kStorage, kDiverged, kStaleAttempt };

// `status` with `kind` attached (an OK status stays OK).
absl::Status WithFailureKind(absl::Status status, FailureKind kind);

// The kind attached to `status`, if any.
std::optional<FailureKind> GetFailureKind(const absl::Status& status);

// True for the errno values of failing storage: ENOSPC, EDQUOT, EIO, EROFS.
bool IsStorageErrno(int error);

// The status of a file operation that failed with `error`: `message` (which
// names the file and what failed) as UNAVAILABLE with FailureKind::kStorage
// for failing storage (IsStorageErrno: retried once the disk has room), else
// INTERNAL.
absl::Status FileOperationError(absl::string_view message, int error);

}  // namespace sbp
